"""One error style everywhere, `error: <field>: <problem>; <fix>`: click's and typer's own refusals (a bad value,
an unknown flag or command, a missing option or argument, an extra argument) are rewritten into it at the one
error boundary, as gpuctl's own are written. Counts say `1 node`, `2 nodes`."""

from __future__ import annotations

import re
import subprocess
import sys
import tokenize
from pathlib import Path

import pytest

from gpuctl.cli.main import run

ROOT = Path(__file__).resolve().parents[2]

# command line -> the field its error must start with (what the user typed: a flag, NAME, a command word)
CASES = [
    # click / typer
    (["cluster", "create", "--gpu", "t4", "--slices", "two"], "--slices"),
    (["cluster", "create", "--gpu", "t4", "--timeout", "abc"], "--timeout"),
    (["cluster", "create", "--gpu", "t4", "--bogus"], "--bogus"),
    (["cluster", "create", "--gpu", "t4", "--nodegroup", "gpu"], "--nodegroup"),
    (["cluster", "create"], "--gpu"),
    (["mig", "validate", "3g.20gb"], "--gpu"),
    (["tenant", "add"], "NAME"),
    (["clustr"], "clustr"),
    (["cluster", "creat"], "creat"),
    (["cluster", "create", "--gpu", "t4", "--nodes"], "--nodes"),
    (["cluster", "create", "--gpu", "t4", "--validate=x"], "--validate"),
    (["--context"], "--context"),
    (["tenant", "add", "team-a", "team-b"], "team-b"),
    (["gpus", "extra", "more"], "extra more"),
    (["--kubeconfig", "", "gpus"], "--kubeconfig"),
    (["--debug=maybe", "gpus"], "--debug"),
    # gpuctl's own
    (["-o", "xml", "gpus"], "-o/--output"),
    (["cluster", "create", "--gpu", "t44", "--export-spec"], "--gpu"),
    (["cluster", "create", "--gpu", "t4", "--sharing", "foo", "--export-spec"], "--sharing"),
    (["cluster", "create", "--gpu", "t4", "--nodes", "0", "--export-spec"], "--nodes"),
    (["mig", "validate", "9g.99gb", "--gpu", "a100-40gb"], "LAYOUT"),
    (["nodegroup", "scale", "--cluster", "demo", "--name", "ng"], "--nodes"),
    (["apply", "-f", "/nonexistent/gpu-platform.yaml"], "-f"),
]


@pytest.fixture(autouse=True)
def nowhere(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    for name in ("GPUCTL_STATE_DIR", "GPUCTL_CACHE_DIR", "HOME"):
        monkeypatch.setenv(name, str(tmp_path / name.lower()))
    monkeypatch.setenv("KUBECONFIG", str(tmp_path / "kubeconfig"))
    monkeypatch.delenv("GPUCTL_DEBUG", raising=False)


def _check(line: str, field: str) -> None:
    assert line.startswith(f"error: {field}: "), line
    assert "; " in line.removeprefix(f"error: {field}: "), line  # a fix follows the problem
    assert ".;" not in line and "?;" not in line, line
    assert not re.search(r"Invalid value|No such (option|command)|Missing (option|argument)|Got unexpected|Did you mean", line), line


@pytest.mark.parametrize("args,field", CASES, ids=[" ".join(a) for a, _ in CASES])
@pytest.mark.slow  # gpuctl processes, one a case
def test_a_bad_command_line_is_one_line_naming_its_field(args: list[str], field: str,
                                                        capsys: pytest.CaptureFixture[str]) -> None:
    assert run(args) == 2
    out, err = capsys.readouterr()
    assert out == ""
    lines = err.splitlines()
    assert len(lines) == 1, err
    _check(lines[0], field)


def test_the_fix_names_what_to_pass(capsys: pytest.CaptureFixture[str]) -> None:
    expected = {
        ("cluster", "create"): "error: --gpu: required; pass --gpu MODEL (see 'gpuctl cluster create --help')",
        ("clustr",): "error: clustr: not a 'gpuctl' command; did you mean 'cluster'? (see 'gpuctl --help')",
        ("tenant", "add"): "error: NAME: required; usage: gpuctl tenant add [OPTIONS] NAME",
        ("cluster", "create", "--gpu", "t4", "--nodes"):
            "error: --nodes: needs a value; pass --nodes N (see 'gpuctl cluster create --help')",
        ("cluster", "create", "--gpu", "t4", "--slices", "two"):
            "error: --slices: 'two' is not a whole number in ASCII digits; see 'gpuctl cluster create --help'",
    }
    for args, line in expected.items():
        assert run(list(args)) == 2
        assert capsys.readouterr().err.strip() == line


def test_the_console_script_says_the_same() -> None:
    proc = subprocess.run([sys.executable, "-m", "gpuctl", "cluster", "create", "--gpu", "t4", "--bogus"],
                          capture_output=True, text=True, timeout=60, cwd=ROOT)
    assert proc.returncode == 2 and proc.stdout == ""
    assert proc.stderr == "error: --bogus: no such option; did you mean '--gpu'? (see 'gpuctl cluster create --help')\n"


def test_a_group_without_its_command_shows_its_help(capsys: pytest.CaptureFixture[str]) -> None:
    assert run(["cluster"]) == 2
    out, err = capsys.readouterr()
    assert out == "" and err.startswith("Usage: gpuctl cluster [OPTIONS] COMMAND") and "\nCommands:\n" in err
    assert not err.startswith("error:")


def test_one_stop_before_the_fix() -> None:
    from gpuctl.util.errors import ClusterError

    err = ClusterError("cannot load ~/.kube/config: Invalid kube-config file. No configuration found.",
                       "pass --kubeconfig/--context")
    assert err.one_line() == ("cannot load ~/.kube/config: Invalid kube-config file. No configuration found; pass "
                              "--kubeconfig/--context")


def test_the_boundary_leaves_no_stray_stop(capsys: pytest.CaptureFixture[str]) -> None:
    from gpuctl.cli.main import _fail

    _fail("x: unknown value 'z'. Did you mean 'y'?; see 'gpuctl --help'", 2)
    _fail("x: No configuration found.; pass --kubeconfig", 2)
    assert capsys.readouterr().err.splitlines() == ["error: x: unknown value 'z'. Did you mean 'y'? see 'gpuctl --help'",
                                                    "error: x: No configuration found; pass --kubeconfig"]


def test_counts_agree_with_their_nouns() -> None:
    from gpuctl.util.words import noun, plural

    assert [plural(n, "node") for n in (0, 1, 2)] == ["0 nodes", "1 node", "2 nodes"]
    assert plural(1, "NodeClaim") == "1 NodeClaim" and plural(3, "NodeClaim") == "3 NodeClaims"
    assert noun(1, "carries", "carry") == "carries" and noun(4, "carries", "carry") == "carry"


# `tenant(s)` in gpuctl/ops/tenancy/tenants.py: that package was being reworked at the same time; its hint is
# worded there.
KNOWN = {"gpuctl/ops/tenancy/tenants.py"}


def test_no_message_counts_with_a_parenthesised_plural() -> None:
    """`1 NodeClaim(s)`, `node(s)`: a message says `1 NodeClaim` / `2 NodeClaims` (gpuctl.util.words)."""
    found = []
    for path in sorted((ROOT / "gpuctl").rglob("*.py")):
        relative = str(path.relative_to(ROOT))
        if "_data" in path.parts or relative in KNOWN:
            continue
        with path.open("rb") as file:
            for token in tokenize.tokenize(file.readline):
                if token.type == tokenize.STRING and re.search(r"[A-Za-z]\(s\)|\} [a-z]+s carry\b", token.string):
                    found.append(f"{relative}:{token.start[0]}: {token.string[:80]}")
    assert found == []
