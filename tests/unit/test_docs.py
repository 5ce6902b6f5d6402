"""The documentation site holds together: it builds, its links resolve, and its command lines parse.

- `mkdocs build --strict` (mkdocs.yml, theme material) builds docs/ without a warning;
- every internal link of README.md and docs/ names a file that exists and, with `#anchor`, a heading of that
  page, as Python-Markdown's toc (which mkdocs uses) makes its ids;
- every `gpuctl ...` line of the docs' sh/console code blocks and of the README's command table is parsed by
  the CLI's own click parser (the root group, then each subcommand's `make_context`), so a renamed or removed
  flag fails here, naming the file and line;
- the README stays short and the pages keep their lines at most 120 characters (code blocks aside).
"""

from __future__ import annotations

import contextlib
import io
import os
import re
import shlex
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

ROOT = Path(__file__).resolve().parents[2]
DOCS = ROOT / "docs"
README = ROOT / "README.md"
README_MAX_LINES = 250
MAX_LINE = 120
SHELL_LANGUAGES = {"sh", "bash", "shell", "console"}
FENCE = re.compile(r"^(\s*)(```+|~~~+)\s*([\w+-]*)")
LINK = re.compile(r"(?<!!)\[(?:[^\]\[]|\[[^\]]*\])*\]\(([^)\s]+)(?:\s+\"[^\"]*\")?\)")
SHELL_CUT = {"|", "||", "&&", ";", "&", ">", ">>", "2>", "2>&1", "<"}


def pages() -> list[Path]:
    return [README, *sorted(DOCS.rglob("*.md"))]


def top_pages() -> list[Path]:
    """The pages written for the site (docs/research/ holds research notes kept as they were written)."""
    return [README, *sorted(DOCS.glob("*.md"))]


def rel(path: Path) -> str:
    return str(path.relative_to(ROOT)) if path.is_relative_to(ROOT) else str(path)


# --- markdown structure -------------------------------------------------------------------------------------


@dataclass
class Block:
    language: str
    start: int  # 1-based line number of the block's first content line
    lines: list[str]


def split_markdown(text: str) -> tuple[list[Block], list[tuple[int, str]]]:
    """Fenced code blocks, and the other lines (number, text)."""
    blocks: list[Block] = []
    prose: list[tuple[int, str]] = []
    fence: str | None = None
    for number, line in enumerate(text.splitlines(), 1):
        match = FENCE.match(line)
        if fence is None and match:
            fence = match[2]
            blocks.append(Block(match[3].lower(), number + 1, []))
        elif fence is not None and line.strip().startswith(fence) and not line.strip()[len(fence):].strip():
            fence = None
        elif fence is not None:
            blocks[-1].lines.append(line)
        else:
            prose.append((number, line))
    return blocks, prose


def without_code_spans(line: str) -> str:
    return re.sub(r"(`+).*?\1", "", line)


# --- 1. the site builds -------------------------------------------------------------------------------------


@pytest.mark.slow  # builds the site with mkdocs
def test_mkdocs_builds_the_site_strictly(tmp_path: Path) -> None:
    try:
        import material  # noqa: F401
        import mkdocs  # noqa: F401
    except ImportError as exc:  # a venv made before mkdocs joined the test extras
        pytest.fail(f"{exc.name} is not installed: run `make setup` (pip install -e '.[test]')")
    site = tmp_path / "site"
    proc = subprocess.run([sys.executable, "-m", "mkdocs", "build", "--strict", "--config-file",
                           str(ROOT / "mkdocs.yml"), "--site-dir", str(site)],
                          cwd=ROOT, capture_output=True, text=True, timeout=300,
                          env=dict(os.environ, NO_MKDOCS_2_WARNING="1"))  # no banner about MkDocs 2.0
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert (site / "index.html").is_file()
    built = {p.parent.name for p in site.glob("*/index.html")}
    missing = {p.stem for p in DOCS.glob("*.md") if p.stem != "index"} - built
    assert not missing, f"pages not built: {sorted(missing)}"


# --- 2. internal links resolve ------------------------------------------------------------------------------


_ANCHORS: dict[Path, set[str]] = {}


def anchors(page: Path) -> set[str]:
    """The ids mkdocs gives the headings of `page`: its own markdown extensions, toc's slugify."""
    if page not in _ANCHORS:
        import markdown
        from mkdocs.config import load_config

        environ = dict(os.environ)
        try:
            with contextlib.redirect_stderr(io.StringIO()):
                config = load_config(str(ROOT / "mkdocs.yml"))
        finally:  # loading the material theme sets NO_MKDOCS_2_WARNING in os.environ
            for key in set(os.environ) - set(environ):
                del os.environ[key]
            os.environ.update(environ)
        md = markdown.Markdown(extensions=config["markdown_extensions"], extension_configs=config["mdx_configs"])
        md.convert(page.read_text())

        def walk(tokens: list[dict[str, Any]]) -> set[str]:
            return {t["id"] for t in tokens} | {i for t in tokens for i in walk(t["children"])}

        _ANCHORS[page] = walk(md.toc_tokens)
    return _ANCHORS[page]


def links(page: Path) -> list[tuple[int, str]]:
    _, prose = split_markdown(page.read_text())
    return [(number, m[1]) for number, line in prose for m in LINK.finditer(without_code_spans(line))]


def broken_links(page: Path) -> list[str]:
    problems = []
    for number, target in links(page):
        if re.match(r"[a-z][a-z0-9+.-]*:", target):  # https:, mailto:
            continue
        path_part, _, anchor = target.partition("#")
        linked = (page.parent / path_part).resolve() if path_part else page
        where = f"{rel(page)}:{number}: link {target!r}"
        if not linked.exists():
            problems.append(f"{where}: no file {path_part!r}")
        elif page.is_relative_to(DOCS) and not linked.is_relative_to(DOCS):
            problems.append(f"{where}: a page links only inside docs/ (the site holds nothing else)")
        elif anchor and linked.suffix != ".md":
            problems.append(f"{where}: an anchor in a file that is not a page")
        elif anchor and anchor not in anchors(linked):
            problems.append(f"{where}: no heading with id {anchor!r} in {rel(linked)}")
    return problems


def test_every_internal_link_resolves() -> None:
    problems = [problem for page in pages() for problem in broken_links(page)]
    assert not problems, "\n".join(problems)
    assert any("docs/" in target for _, target in links(README)), "the README links to no docs page"


def test_a_broken_link_or_anchor_is_found(tmp_path: Path) -> None:
    page = DOCS / "index.md"
    bad = tmp_path / "bad.md"
    bad.write_text(f"[a]({page}#no-such-heading) [b](missing.md) [c]({page}) `[d](x.md)`\n")
    found = broken_links(bad)
    assert len(found) == 2, found
    assert "no heading with id 'no-such-heading'" in found[0] and "no file 'missing.md'" in found[1]


# --- 3. command lines parse -----------------------------------------------------------------------------------


@dataclass
class CommandLine:
    page: Path
    line: int
    text: str

    def __str__(self) -> str:
        return f"{rel(self.page)}:{self.line}: {self.text}"


def block_commands(page: Path, block: Block) -> list[CommandLine]:
    """The `gpuctl` lines of a shell block: continuations joined, `$ ` prompts dropped (a console block's
    other lines are output)."""
    found = []
    pending: tuple[int, str] | None = None
    for offset, raw in enumerate(block.lines):
        number = block.start + offset
        line = raw.strip()
        if pending is not None:
            start, text = pending
            line = f"{text} {line}"
            number = start
        elif block.language == "console":
            if not line.startswith("$ "):
                continue
            line = line[2:]
        if line.endswith("\\"):
            pending = (number, line[:-1].rstrip())
            continue
        pending = None
        if line.startswith("gpuctl ") or line == "gpuctl":
            found.append(CommandLine(page, number, line))
    return found


def table_commands(page: Path) -> list[CommandLine]:
    """`gpuctl ...` code spans that open a table row's cell (the README's command table)."""
    _, prose = split_markdown(page.read_text())
    return [CommandLine(page, number, m[1]) for number, line in prose if line.lstrip().startswith("|")
            for m in re.finditer(r"\|\s*`(gpuctl [^`]+)`", line)]


def command_lines(page: Path) -> list[CommandLine]:
    blocks, _ = split_markdown(page.read_text())
    found = [c for b in blocks if b.language in SHELL_LANGUAGES for c in block_commands(page, b)]
    return found + table_commands(page)


def bracket_groups(text: str) -> list[tuple[int, int]]:
    """(start, end) of each outermost `[...]` that opens a word."""
    groups: list[tuple[int, int]] = []
    depth = start = 0
    for i, char in enumerate(text):
        if char == "[" and (i == 0 or text[i - 1] == " " or depth):
            start = i if depth == 0 else start
            depth += 1
        elif char == "]" and depth:
            depth -= 1
            if depth == 0:
                groups.append((start, i))
    return groups


def without_optional(text: str) -> str:
    groups = bracket_groups(text)
    ends = [-1, *(end for _, end in groups)]
    starts = [*(start for start, _ in groups), len(text)]
    return " ".join(" ".join(text[end + 1:start] for end, start in zip(ends, starts, strict=True)).split())


def optional_parts(text: str) -> list[str]:
    """The command line without its `[optional]` parts, then with each one taken (brackets dropped, the first of
    `a|b` alternatives; a nested part in turn), so a flag shown as optional is checked too."""
    variants = [without_optional(text)]
    for start, end in bracket_groups(text):
        before, after = without_optional(text[:start]), without_optional(text[end + 1:])
        for inner in optional_parts(text[start + 1:end]):
            variants.append(" ".join([before, *(word.split("|")[0] for word in inner.split()), after]))
    return list(dict.fromkeys(" ".join(v.split()) for v in variants))


def argv(text: str) -> list[str]:
    """The words of one command, as the shell splits them; `# comments` and what follows a pipe or `&&` cut."""
    words = shlex.split(text, comments=True)
    for i, word in enumerate(words):
        if word in SHELL_CUT or word.startswith((">", "2>")):
            return words[:i]
    return words


def parse_error(args: list[str]) -> str | None:
    """None when gpuctl's own parser takes `args` (gpuctl left out), else click's message."""
    import typer
    from typer.core import TyperGroup

    from gpuctl.cli import main
    from gpuctl.cli.help import NoArgs

    command: Any = main.command()
    words = main.hoist_global_options(args)
    try:
        with contextlib.redirect_stdout(io.StringIO()), contextlib.redirect_stderr(io.StringIO()):
            ctx = command.make_context("gpuctl", words)
            while isinstance(command, TyperGroup):
                rest = [*ctx._protected_args, *ctx.args]
                if not rest:
                    return None  # a group alone, e.g. `gpuctl cluster`: its help
                name, command, rest = command.resolve_command(ctx, rest)
                ctx = command.make_context(name, rest, parent=ctx)
    except typer.Exit as exc:  # --help, --version
        return None if exc.exit_code == 0 else f"exit {exc.exit_code}"
    except NoArgs:  # a group named alone: its help
        return None
    except typer.TyperException as exc:  # click's errors, under typer's public base
        return " ".join(exc.format_message().split())
    return None


def command_problems(page: Path) -> list[str]:
    problems = []
    for command in command_lines(page):
        for variant in optional_parts(command.text):
            try:
                words = argv(variant)
            except ValueError as exc:
                problems.append(f"{command}: cannot split: {exc}")
                break
            error = parse_error(words[1:])
            if error is not None:
                problems.append(f"{command}: {error}" + ("" if variant == command.text else f" (as: {variant})"))
                break
    return problems


@pytest.mark.slow  # every command line of the docs through gpuctl's parser: ~10 s
def test_every_command_line_in_the_docs_parses() -> None:
    counted = {rel(page): len(command_lines(page)) for page in top_pages()}
    assert counted["README.md"] >= 10 and sum(counted.values()) >= 60, counted
    problems = [problem for page in top_pages() for problem in command_problems(page)]
    assert not problems, "\n".join(problems)


def test_a_wrong_command_line_is_refused(tmp_path: Path) -> None:
    page = tmp_path / "page.md"
    page.write_text("\n".join([
        "```sh",
        "gpuctl tenant add team-a --gpus 4 --no-such-flag   # comment",
        "gpuctl nodegroup scale --cloud sim --cluster demo \\",
        "    --name inference --nodes two",
        "gpuctl status [--nodegroup gpu] [--bogus x]",
        "gpuctl gpus -o json | jq .",
        "gpuctl mig validate 3g.20gb --gpu a100-40gb",
        "```",
        "| `gpuctl clusterz list` | typo |",
        "",
    ]))
    found = command_problems(page)
    assert [p.split(": ", 2)[0] for p in found] == [f"{page}:2", f"{page}:3", f"{page}:5", f"{page}:9"], found
    assert "--no-such-flag" in found[0] and "two" in found[1] and "--bogus" in found[2] and "clusterz" in found[3]


# --- 4. shape -------------------------------------------------------------------------------------------------


def test_the_readme_is_short() -> None:
    lines = README.read_text().splitlines()
    assert len(lines) <= README_MAX_LINES, f"README.md has {len(lines)} lines; move detail to a docs/ page"


def test_pages_wrap_their_lines() -> None:
    long = [f"{rel(page)}:{number}: {len(line)} characters" for page in top_pages()
            for number, line in split_markdown(page.read_text())[1] if len(line) > MAX_LINE]
    assert not long, "\n".join(long)


def test_every_page_is_in_the_nav() -> None:
    text = (ROOT / "mkdocs.yml").read_text()
    missing = [rel(p) for p in sorted(DOCS.rglob("*.md")) if str(p.relative_to(DOCS)) not in text]
    assert not missing, missing


def test_the_docs_quick_start_is_the_readmes() -> None:
    """The site's getting-started page shows the quick start the README shows (and test_quickstart runs)."""
    def quick_start(page: Path) -> str:
        text = page.read_text()
        section = text[text.index("### Your first GPU job"):]
        block = re.search(r"```sh\n(.*?)```", section, re.S)
        assert block is not None, f"{rel(page)}: no sh block after 'Your first GPU job'"
        return block[1]

    assert quick_start(DOCS / "getting-started.md") == quick_start(README)
