"""gpuctl's help pages, written as kubectl and eksctl write theirs.

Every command typer builds is rendered by `Command` or `Group` (`adopt` makes it one of them: typer's documented
hook is `Typer(cls=...)`, a subclass of typer.core.TyperGroup or TyperCommand, given to the root in gpuctl.cli.main):
- a usage line and metavars in the user's words (`NAME`, `N`, `SECONDS`, `PATH`, `KEY=VALUE`), never typer's
  `<str>` or `{name}`; a value from a fixed set shows the set (`--sharing none|time-slicing|mps`, from the
  Choice that checks it: `one_of`);
- defaults in the user's units (`[default: 300s]`), none for a count (`-v`) or an unset value;
- options in panels where a command has many (typer's `rich_help_panel`, in the order of PANELS);
- the docstring's `Examples:` section (to its end) right after the description, as kubectl prints it;
- a group lists each subcommand's whole summary (the first paragraph of its help), never cut with `...`;
- a subcommand's page ends naming the global options, which may follow the command (`gpuctl gpus -o json`).
"""

from __future__ import annotations

import inspect
import textwrap
from collections.abc import Iterable
from typing import Any

import typer
from typer.core import TyperCommand, TyperGroup

from gpuctl.cli.lazy import declared, speed_up
from gpuctl.cli.types import count, path, seconds

EXAMPLES = "Examples:"
# Panels in the order they are listed; options named by none are the command's "General" ones ("Options" where
# no option has a panel).
PANELS = ("General", "Node group", "Sharing and MIG", "GPU stack", "Autoscaling", "OpenStack", "EKS")
COLUMN = 30  # the widest option column (click's): a longer option has its help on the next line
_BY_PARSER: dict[Any, str] = {count: "N", seconds: "SECONDS", path: "PATH"}


def one_of(names: Iterable[str]) -> str:
    """The metavar of a flag whose value is one of `names` (a Choice's, where one checks it), as kubectl writes
    them: `table|json|yaml`."""
    return "|".join(names)


def one_of_text(names: Iterable[str]) -> str:
    """The choices of a flag whose names are too long for its metavar, for its help: `one of: A, B, C`."""
    return f"one of: {', '.join(names)}"


def split_help(text: str | None) -> tuple[str, list[str]]:
    """A help text without its `Examples:` section, and that section's lines (comments `# ...` included)."""
    text = inspect.cleandoc(text or "").partition("\f")[0]
    lines = text.splitlines()
    if EXAMPLES not in (line.strip() for line in lines):
        return text, []
    at = [line.strip() for line in lines].index(EXAMPLES)
    return "\n".join(lines[:at]).rstrip(), [line.strip() for line in lines[at + 1:] if line.strip()]


def examples(command: Any) -> list[str]:
    """The command lines of `command`'s Examples section (without its comments)."""
    return [line for line in split_help(command.help)[1] if not line.startswith("#")]


def summary(command: Any) -> str:
    """What a group lists for `command`: its short help, else the first paragraph of its help, whole."""
    if command.short_help:
        return " ".join(command.short_help.split())
    return " ".join(split_help(command.help)[0].split("\n\n")[0].split())


def metavar(param: Any) -> str:
    """The value's name in the user's words: the parameter's own, else by its parser, else VALUE."""
    if param.metavar:
        return str(param.metavar)
    info = declared(param)[1]
    return _BY_PARSER.get(getattr(info, "parser", None), "VALUE")


def shown_default(param: Any) -> str | None:
    """The default as a user writes it: `300s` for seconds, the flag for an on/off pair; none for a count, an
    unset value or an off switch."""
    default = param.default
    if param.count or default is None or default == [] or default == () or (param.is_flag and not param.secondary_opts
                                                                            and not default):
        return None
    if param.is_flag and param.secondary_opts:
        return (param.opts if default else param.secondary_opts)[0].lstrip("-")
    if metavar(param) == "SECONDS":
        return f"{float(default):g}s"
    return str(default)


def _extras(help_text: str, extras: list[str]) -> str:
    return f"{help_text}  [{'; '.join(extras)}]" if extras else help_text


def option_record(param: Any) -> tuple[str, str]:
    """The option's line in the help: `-o, --output table|json|yaml` and its help with default, env var, required."""
    def names(opts: list[str]) -> str:
        text = ", ".join(sorted(opts, key=lambda o: o.startswith("--")))
        return text if param.is_flag or param.count else f"{text} {metavar(param)}"

    left = " / ".join(names(opts) for opts in (param.opts, param.secondary_opts) if opts)
    extras = []
    if param.envvar and param.show_envvar:
        extras.append(f"env var: {param.envvar}")
    default = shown_default(param)
    if default is not None and param.show_default is not False:
        extras.append(f"default: {default}")
    if param.required:
        extras.append("required")
    return left, _extras(param.help or "", extras)


def argument_usage(param: Any) -> str:
    name = metavar(param) if param.metavar else param.name.upper()
    name += "..." if param.nargs != 1 else ""
    return name if param.required else f"[{name}]"


def _argument_record(param: Any) -> tuple[str, str]:
    return argument_usage(param).strip("[]"), _extras(getattr(param, "help", None) or "",
                                                     ["required"] if param.required else [])


def _write_params(command: Any, ctx: Any, formatter: Any) -> None:
    arguments: list[tuple[str, str]] = []
    panels: dict[str | None, list[tuple[str, str]]] = {}
    for param in command.get_params(ctx):
        if param.param_type_name == "argument":
            arguments.append(_argument_record(param))
        elif not param.hidden:
            panels.setdefault(getattr(param, "rich_help_panel", None), []).append(option_record(param))
    if arguments:
        with formatter.section("Arguments"):
            formatter.write_dl(arguments)
    if set(panels) == {None}:
        panels = {"Options": panels[None]}
    elif None in panels:
        panels = {"General": panels.pop(None) + panels.pop("General", []), **panels}
    order = {name: i for i, name in enumerate(PANELS)}
    width = min(max(len(left) for rows in panels.values() for left, _ in rows), COLUMN)  # one column in all panels
    for name in sorted(panels, key=lambda n: order.get(n or "", len(PANELS))):
        with formatter.section(name):
            formatter.write_dl([(left.ljust(width), text) for left, text in panels[name]], col_max=COLUMN)


def _write_examples(command: Any, formatter: Any) -> None:
    """Comments wrapped as text; a command line too long for the width continued with ` \\`, as in a shell."""
    lines = split_help(command.help)[1]
    if not lines:
        return
    with formatter.section("Examples"):
        for line in lines:
            width = max(formatter.width - formatter.current_indent, 20) - 2
            if line.startswith("#"):
                for part in textwrap.wrap(line.lstrip("# "), width):
                    formatter.write(f"{'':>{formatter.current_indent}}# {part}\n")
                continue
            words: list[str] = []  # a flag with its value stays on one line
            for word in line.split(" "):
                if words and words[-1][:1] in ("-", ">") and " " not in words[-1] and not word.startswith("-"):
                    words[-1] += f" {word}"
                else:
                    words.append(word)
            current, indent = "", ""
            for word in words:
                if current and len(indent + current) + 1 + len(word) > width:
                    formatter.write(f"{'':>{formatter.current_indent}}{indent}{current} \\\n")
                    current, indent = word, "    "
                else:
                    current = f"{current} {word}" if current else word
            formatter.write(f"{'':>{formatter.current_indent}}{indent}{current}\n")


def _write_global_options(ctx: Any, formatter: Any) -> None:
    root = ctx.find_root()
    if root is ctx:
        return
    shown = []
    for param in root.command.get_params(root):
        if param.param_type_name == "option" and not param.hidden and not param.is_eager:
            first = param.opts[0]
            shown.append(first if param.is_flag or param.count else f"{first} {metavar(param)}")
    formatter.write_paragraph()
    formatter.write_text(f"Global options, before or after the command: {', '.join(shown)} (see "
                         f"'{root.command_path} --help').")


class NoArgs(Exception):
    """A command that needs arguments named alone (`gpuctl cluster`): its help, which gpuctl prints on stderr."""

    def __init__(self, ctx: Any) -> None:
        super().__init__(ctx.command_path)
        self.help = ctx.get_help()


def _parse_args(command: Any, parse: Any, ctx: Any, args: list[str]) -> list[str]:
    """click's parser raises some usage errors without the context (`Option '--nodes' requires an argument`):
    the command being parsed is theirs, so the error can name it and its help page."""
    if not args and command.no_args_is_help and not ctx.resilient_parsing:
        raise NoArgs(ctx)
    speed_up(command, command.get_params(ctx))
    try:
        return parse(ctx, args)
    except typer.TyperException as exc:  # click's usage errors, under typer's public base
        if getattr(exc, "ctx", ctx) is None:
            exc.ctx = ctx  # type: ignore[attr-defined]
        raise


def _usage_pieces(command: Any, ctx: Any) -> list[str]:
    pieces = ["[OPTIONS]"] + [argument_usage(p) for p in command.get_params(ctx) if p.param_type_name == "argument"]
    return [*pieces, command.subcommand_metavar] if isinstance(command, TyperGroup) else pieces


def _write_help_text(command: Any, formatter: Any) -> None:
    text = split_help(command.help)[0]
    if text:
        formatter.write_paragraph()
        with formatter.indentation():
            formatter.write_text(text)
    _write_examples(command, formatter)


# typer's classes with gpuctl's help; methods only, so a command typer built can become one (`adopt`).
class Command(TyperCommand):
    """A gpuctl command's help."""

    def parse_args(self, ctx: Any, args: list[str]) -> list[str]:
        return _parse_args(self, super().parse_args, ctx, args)

    def collect_usage_pieces(self, ctx: Any) -> list[str]:
        return _usage_pieces(self, ctx)

    def format_help_text(self, ctx: Any, formatter: Any) -> None:
        _write_help_text(self, formatter)

    def format_options(self, ctx: Any, formatter: Any) -> None:
        _write_params(self, ctx, formatter)

    def format_epilog(self, ctx: Any, formatter: Any) -> None:
        _write_global_options(ctx, formatter)


class Group(TyperGroup):
    """A gpuctl command group's help: its options, then each subcommand with its whole summary."""

    def parse_args(self, ctx: Any, args: list[str]) -> list[str]:
        return _parse_args(self, super().parse_args, ctx, args)

    def collect_usage_pieces(self, ctx: Any) -> list[str]:
        return _usage_pieces(self, ctx)

    def format_help_text(self, ctx: Any, formatter: Any) -> None:
        _write_help_text(self, formatter)

    def format_options(self, ctx: Any, formatter: Any) -> None:
        _write_params(self, ctx, formatter)
        rows = [(name, summary(cmd)) for name in self.list_commands(ctx)
                if (cmd := self.get_command(ctx, name)) is not None and not cmd.hidden]
        if rows:
            with formatter.section("Commands"):
                formatter.write_dl(rows)

    def format_epilog(self, ctx: Any, formatter: Any) -> None:
        _write_global_options(ctx, formatter)


def adopt(command: Any) -> Any:
    """`command` and its subcommands as typer built them, rendered by gpuctl's help: typer's own two classes become
    these subclasses of them, which add methods only; their parameters take plain values fast (lazy.speed_up)."""
    if type(command) is TyperGroup:
        command.__class__ = Group
    elif type(command) is TyperCommand:
        command.__class__ = Command
    speed_up(command, command.params)
    for name in list(getattr(command, "commands", None) or ()):
        adopt(command.commands[name])
    return command
