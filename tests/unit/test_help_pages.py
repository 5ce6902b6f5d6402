"""Every help page reads as kubectl's and eksctl's do: metavars in the user's words, the choices of a flag listed,
defaults in the user's units, an Examples section whose command lines the CLI's own parser takes, cluster create's
flags in panels, and group listings that show each subcommand's whole summary. The commands are found by walking
the CLI itself, so a new command is checked without being listed here."""

from __future__ import annotations

import importlib
import pkgutil
import re
import shlex
from typing import Any

import pytest

import gpuctl.model
import gpuctl.util
from gpuctl.cli import main
from gpuctl.cli.entry import render_helps
from gpuctl.cli.help import examples, split_help, summary
from gpuctl.cli.lazy import declared
from gpuctl.cli.main import hoist_global_options
from gpuctl.model.cloud_options import AMI_TYPES, CLOUD
from gpuctl.model.sharing import STRATEGY
from gpuctl.model.stack_spec import MIG_STRATEGY, NFD_OWNER
from gpuctl.util.choices import Choice
from gpuctl.util.output import FORMAT


def _walk(command: Any, path: list[str]) -> list[tuple[str, Any]]:
    found = [(" ".join(path), command)]
    for name in list(getattr(command, "commands", None) or {}):
        found += _walk(command.commands[name], [*path, name])
    return found


COMMANDS = dict(_walk(main.command(), []))
GROUPS = [path for path, command in COMMANDS.items() if getattr(command, "commands", None)]
LEAVES = [path for path in COMMANDS if path not in GROUPS]
# The flags whose value a Choice (or the AMI types) checks, and the names their help must show.
CHOICE_FLAGS = {"--cloud": CLOUD.names, "--sharing": STRATEGY.names, "--nfd": NFD_OWNER.names,
                "--mig-strategy": MIG_STRATEGY.names, "--strategy": MIG_STRATEGY.names, "--output": FORMAT.names,
                "--ami-type": AMI_TYPES}


@pytest.fixture(scope="module")
def helps() -> dict[str, str]:
    return render_helps(78)  # what `gpuctl ... --help` prints at 80 columns, every page


def _section(text: str, heading: str) -> str:
    """The lines of `heading:`'s section, up to the next blank line."""
    lines = text.splitlines()
    at = lines.index(f"{heading}:")
    end = next((i for i in range(at + 1, len(lines)) if not lines[i].strip()), len(lines))
    return "\n".join(lines[at + 1:end])


def _option_lines(text: str) -> list[str]:
    """The option column of each option line (`  -o, --output table|json|yaml`)."""
    return [re.split(r"\s{2,}", line.strip())[0] for line in text.splitlines() if re.match(r"  -", line)]


def test_every_command_has_a_help_page(helps: dict[str, str]) -> None:
    assert set(helps) == set(COMMANDS)
    assert len(COMMANDS) >= 28 and {"cluster create", "tenant add", "mig apply", "gpus"} <= set(COMMANDS)


@pytest.mark.parametrize("path", list(COMMANDS), ids=lambda p: p or "gpuctl")
def test_metavars_are_the_users_words(path: str, helps: dict[str, str]) -> None:
    text = helps[path]
    usage = text.splitlines()[0]
    assert usage.startswith(f"Usage: {' '.join(['gpuctl', path]).strip()} [OPTIONS]"), usage
    assert not re.search(r"[{}<>]", usage), usage  # `{name}`, `<str>`
    assert not re.search(r"<(str|int|float|bool|Path|list\[\w+\])>", text), text
    for column in _option_lines(text):
        assert not re.search(r"[{}<>]", column) and not column.endswith((" VALUE", " TEXT")), (path, column)
    for param in COMMANDS[path].params:
        if param.param_type_name == "argument":
            assert param.metavar and param.metavar.isupper(), (path, param.name)  # NAME, LAYOUT


@pytest.mark.parametrize("path", list(COMMANDS), ids=lambda p: p or "gpuctl")
def test_defaults_are_in_the_users_units(path: str, helps: dict[str, str]) -> None:
    text = helps[path]
    assert not re.search(r"\[default: -?\d+\.\d+\]", text), text  # 300.0
    for line in text.splitlines():
        if "-v, --verbose" in line:
            assert "default" not in line  # a count has no default worth saying
    for param in COMMANDS[path].params:
        parser = getattr(declared(param)[1], "parser", None)
        if getattr(parser, "__name__", "") == "seconds" and param.default is not None:
            assert f"[default: {param.default:g}s]" in " ".join(text.split()), (path, param.name)


@pytest.mark.parametrize("path", list(COMMANDS), ids=lambda p: p or "gpuctl")
@pytest.mark.slow  # every example of every help page parsed
def test_every_command_has_examples_the_parser_takes(path: str, helps: dict[str, str]) -> None:
    lines = examples(COMMANDS[path])
    assert (1 if path in GROUPS else 2) <= len(lines) <= 4, (path, lines)
    assert "\nExamples:\n" in helps[path]
    for line in lines:
        command, resolved = _parse(line)
        assert resolved == path or (path in GROUPS and resolved.startswith(f"{path} ".lstrip())), (path, line)


def _parse(line: str) -> tuple[Any, str]:
    """The command an example line runs, parsed as the CLI parses it (unknown flags, missing or bad values fail)
    and not run; the part after a pipe or redirection belongs to the shell."""
    lexer = shlex.shlex(line, posix=True, punctuation_chars="|&;<>")
    lexer.whitespace_split = True
    words = list(lexer)
    if cut := [i for i, w in enumerate(words) if w and set(w) <= set("|&;<>")]:
        words = words[:cut[0]]
    assert words[0] == "gpuctl", line
    cmd = main.command()
    ctx = cmd.make_context("gpuctl", hoist_global_options(words[1:]), resilient_parsing=False)
    path: list[str] = []
    while getattr(cmd, "commands", None):
        name, cmd, rest = cmd.resolve_command(ctx, [*ctx._protected_args, *ctx.args])
        path.append(name)
        ctx = cmd.make_context(name, rest, parent=ctx, resilient_parsing=False)
    return cmd, " ".join(path)


@pytest.mark.parametrize("line", ["gpuctl cluster create --gpu t4 --bogus", "gpuctl cluster create --nodes 2",
                                  "gpuctl cluster create --gpu t4 --nodes two", "gpuctl clustr list",
                                  "gpuctl tenant add"])
def test_a_wrong_example_would_fail(line: str) -> None:
    import typer

    with pytest.raises(typer.TyperException) as raised:  # click's UsageError, under typer's public base
        _parse(line)
    assert raised.value.exit_code == 2


def _names_choices(column: str, help_text: str, names: tuple[str, ...]) -> bool:
    """The metavar is the choices (`--sharing none|time-slicing|mps`), or, where they are too long for one, the
    help lists them: `one of: A, B, C`."""
    return column.endswith(" " + "|".join(names)) or f"one of: {', '.join(names)}" in help_text


def _help_of(text: str, column: str) -> str:
    """The help of the option whose column is `column`, its lines joined."""
    lines = text.splitlines()
    at = next(i for i, line in enumerate(lines) if line.strip().startswith(column))
    end = next((i for i in range(at + 1, len(lines)) if re.match(r"  -|\S", lines[i]) or not lines[i].strip()),
               len(lines))
    return " ".join(" ".join(lines[at:end]).split())


def _choices() -> list[Choice]:
    found: list[Choice] = []
    for package in (gpuctl.model, gpuctl.util):
        for module in pkgutil.iter_modules(package.__path__, f"{package.__name__}."):
            found += [v for v in vars(importlib.import_module(module.name)).values() if isinstance(v, Choice)]
    return list({id(c): c for c in found}.values())


def test_choices_are_listed_where_a_flag_takes_one(helps: dict[str, str]) -> None:
    seen = set()
    for path, text in helps.items():
        for column in _option_lines(text):
            flags = [w.rstrip(",") for w in column.split() if w.startswith("-")]
            for flag in set(flags) & set(CHOICE_FLAGS):
                assert _names_choices(column, _help_of(text, column), CHOICE_FLAGS[flag]), (path, column)
                seen.add(flag)
    assert seen == set(CHOICE_FLAGS)
    # Every Choice gpuctl checks a value with is shown by a flag, or (too long for a line) names where it is listed.
    shown = {tuple(names) for names in CHOICE_FLAGS.values()}
    choices = _choices()
    assert len(choices) >= 6, choices  # GPU, cloud, the two strategies, NFD owner, output format
    for choice in choices:
        if choice.listed_by:
            assert any(choice.listed_by.split(" lists")[0] in text for text in helps.values()), choice.what
        else:
            assert choice.names in shown, f"a Choice no flag shows: {choice.what} {choice.names}"


@pytest.mark.parametrize("path", list(COMMANDS), ids=lambda p: p or "gpuctl")
def test_no_option_lists_its_choices_in_prose(path: str, helps: dict[str, str]) -> None:
    """`--sharing <str>  time-slicing, mps or none.` is what this catches: the names belong in the metavar."""
    choices = [c for c in _choices() if not c.listed_by] + [Choice("AMI type", AMI_TYPES)]
    for param in COMMANDS[path].params:
        for choice in choices:
            listed = [n for n in choice.names if re.search(rf"(?<![\w-]){re.escape(n)}(?![\w-])", param.help or "")]
            if len(listed) >= 2:
                assert param.metavar == "|".join(choice.names) or f"one of: {', '.join(choice.names)}" in param.help, \
                    (path, param.name, param.help)


@pytest.mark.parametrize("path", GROUPS, ids=lambda p: p or "gpuctl")
def test_groups_list_each_subcommands_whole_summary(path: str, helps: dict[str, str]) -> None:
    listing = _section(helps[path], "Commands")
    assert "..." not in listing
    flat = "".join(listing.split())
    for name, command in COMMANDS[path].commands.items():
        text = summary(command)
        assert text and "".join(f"{name}{text}".split()) in flat, (path, name, text)
        assert text == " ".join(split_help(command.help)[0].split("\n\n")[0].split())  # the first paragraph, whole


def test_cluster_create_groups_its_flags_in_panels(helps: dict[str, str]) -> None:
    text = helps["cluster create"]
    headings = [line[:-1] for line in text.splitlines() if re.fullmatch(r"[A-Z][A-Za-z ]*:", line)]
    assert headings == ["Examples", "General", "Node group", "Sharing and MIG", "GPU stack", "Autoscaling",
                        "OpenStack", "EKS"]
    panels = {h: _option_lines(_section(text, h)) for h in headings[1:]}
    assert "--sharing none|time-slicing|mps" in panels["Sharing and MIG"]
    assert "--instance-type TYPE" in panels["EKS"] and "--flavor NAME" in panels["OpenStack"]
    assert "--karpenter" in panels["Autoscaling"] and "--kueue" in panels["GPU stack"]
    listed = [column for columns in panels.values() for column in columns]
    assert len(listed) == len([p for p in COMMANDS["cluster create"].params if p.param_type_name == "option"]) + 1


def test_help_fits_80_columns_and_names_the_global_options(helps: dict[str, str]) -> None:
    for path, text in helps.items():
        assert max(map(len, text.splitlines())) <= 78, path
        if path:
            assert "Global options" in text and "-o table|wide|json|yaml" in text, path


def test_a_long_example_is_continued_as_in_a_shell(helps: dict[str, str]) -> None:
    text = _section(helps["cluster create"], "Examples")
    assert "--region us-west-2 --name demo \\\n      --gpu a10g" in text  # a flag and its value stay together
    joined = text.replace(" \\\n      ", " ")
    assert "gpuctl cluster create --cloud eks --region us-west-2 --name demo --gpu a10g --karpenter --max-nodes 4" \
        in joined
