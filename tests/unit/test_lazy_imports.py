"""Commands that need no cluster start fast: they must not pay for the cloud SDKs, the Kubernetes
client, Jinja, pydantic (typer's coercion) or YAML where they do not use it, and `--help` is served
from a cache that typer fills once and that is invalidated by anything the text depends on."""

import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

ROOT = Path(__file__).resolve().parents[2]
SPEC = str(ROOT / "tests" / "specs" / "good.yaml")
HEAVY = ("boto3", "botocore", "openstack", "kubernetes", "pyhelm3", "pydantic", "jinja2", "rich")

PROBE = """
import io, sys
from contextlib import redirect_stdout
from gpuctl.cli.main import run
with redirect_stdout(io.StringIO()):
    code = run({args!r})
print("CODE=" + str(code), file=sys.stderr)
names = set(sys.modules) | {{m.split('.')[0] for m in sys.modules}}
print("LOADED=" + ",".join(sorted(names & set({heavy!r}))), file=sys.stderr)
"""


def _loaded_after(args: list[str], heavy: tuple[str, ...] = HEAVY) -> str:
    proc = subprocess.run([sys.executable, "-c", PROBE.format(args=args, heavy=heavy)],
                          capture_output=True, text=True, timeout=60, cwd=ROOT)
    lines = proc.stderr.strip().splitlines()
    assert proc.returncode == 0 and lines[-2] == "CODE=0", proc.stderr
    return lines[-1]


def test_import_of_cli_is_light() -> None:
    proc = subprocess.run([sys.executable, "-c", "import sys, gpuctl.cli.main; "
                           f"print(sorted({{m.split('.')[0] for m in sys.modules}} & set({HEAVY!r} + ('yaml',))))"],
                          capture_output=True, text=True, timeout=60)
    assert proc.stdout.strip() == "[]", proc.stdout + proc.stderr


@pytest.mark.slow  # Python processes timing gpuctl's start-up
def test_help_and_version_are_light() -> None:
    for args in (["--help"], ["--version"], ["cluster", "--help"], ["cluster", "create", "--help"],
                 ["nodegroup", "add", "--help"], ["tenant", "add", "--help"]):
        assert _loaded_after(args, HEAVY + ("yaml",)) == "LOADED=", args


@pytest.mark.parametrize("args", [
    ["gpus"], ["-o", "json", "gpus"],
    ["mig", "validate", "3g.20gb-2x2g.10gb", "--gpu", "a100-40gb"],
    ["mig", "plan", "3g.20gb-2x2g.10gb", "--gpu", "a100-40gb"],
], ids=" ".join)
@pytest.mark.slow  # Python processes timing gpuctl's start-up
def test_catalog_and_mig_commands_load_no_yaml_nor_sdk(args: list[str]) -> None:
    assert _loaded_after(args, HEAVY + ("yaml", "asyncio", "hashlib")) == "LOADED=", args


@pytest.mark.parametrize("args", [
    ["render", "-f", SPEC],
    ["cluster", "create", "--gpu", "t4", "--export-spec"],
], ids=" ".join)
@pytest.mark.slow  # Python processes timing gpuctl's start-up
def test_offline_spec_commands_load_no_cluster_machinery(args: list[str]) -> None:
    # asyncio comes with Helm, urllib.request with the tool downloads: neither is needed to render.
    assert _loaded_after(args, HEAVY + ("asyncio", "urllib.request")) == "LOADED=", args


def test_a_command_loads_only_its_own_module() -> None:
    probe = ("import io, sys; from contextlib import redirect_stdout; from gpuctl.cli.main import run\n"
             "with redirect_stdout(io.StringIO()): run(['gpus'])\n"
             "print(sorted(m for m in sys.modules if m.startswith('gpuctl.cli.')))")
    proc = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, timeout=60)
    loaded = set(eval(proc.stdout))
    assert "gpuctl.cli.gpus" in loaded
    assert not loaded & {"gpuctl.cli.cluster", "gpuctl.cli.nodegroup", "gpuctl.cli.tenant", "gpuctl.cli.apply"}


def test_root_lists_every_command_and_each_loads() -> None:
    from gpuctl.cli.main import COMMANDS, command, run

    root = command()
    assert list(root.commands) == list(COMMANDS)
    for name in COMMANDS:
        assert root.commands[name].name == name
        alone = command([name])  # what a command line naming it runs on: that command only
        assert list(alone.commands) == [name]
    assert "nosuch" not in root.commands
    assert run(["nosuch"]) == 2


def test_a_command_line_gets_the_command_it_names_else_all() -> None:
    from gpuctl.cli.main import COMMANDS, asked_for, split_global_options

    def asked(args: list[str]) -> tuple[str, ...]:
        return asked_for(split_global_options(args)[1])

    assert asked(["gpus"]) == asked(["-o", "json", "gpus"]) == asked(["gpus", "--context", "x"]) == ("gpus",)
    assert asked(["--kubeconfig", "/k", "-v", "cluster", "create"]) == ("cluster",)
    for args in ([], ["--help"], ["gpu"], ["--bogus", "gpus"], ["--", "gpus"], ["-o"], ["-vo", "json", "gpus"]):
        assert asked(args) == tuple(COMMANDS), args


# --- typer's pydantic coercion is skipped for plain values, with typer's own results --------------

SAMPLES: dict[str, list[object]] = {
    "str": ["abc", "", " a ", "ü-ñ", "x\udcff", "-", "a=b:c", 3],
    "int": ["3", "0", "-1", "007", " 3", "3.0", "1_000", "abc", "", "٣", "99999999999999999999", 3, 0, True],
    "float": ["300", "0.5", "1e3", "nan", "inf", "-1", "", "1.5000000001", "300.", 300.0, 1],
    "bool": [True, False, "1", "true", "no", ""],
    "Path": ["a/b", "/nonexistent/x", "", SPEC, str(ROOT), ".", "x\udcff"],
    "list[str]": [("a", "b"), (), ["x"], ("a\udcff",), "a"],
}


def _outcome(process: Any, ctx: object, value: object) -> tuple[object, ...]:
    try:
        result = process(ctx, value)
    except Exception as exc:  # noqa: BLE001 - compared, whatever it is
        return ("error", type(exc).__name__, str(exc))
    return ("ok", type(result).__name__, result)


def test_fast_coercion_agrees_with_typer_for_every_parameter() -> None:
    """Each parameter's process_value (gpuctl.cli.lazy) against typer's own, on values from the command line,
    defaults and unset ones; the commands' callbacks are left out (--version would print and exit)."""
    from gpuctl.cli.lazy import declared
    from gpuctl.cli.main import command

    commands = [command()]
    checked = fast = 0
    while commands:
        cmd = commands.pop()
        commands += [cmd.commands[n] for n in list(getattr(cmd, "commands", {}))]
        ctx = cmd.context_class(cmd)
        for param in cmd.params:
            param.callback = None
            annotation, info = declared(param)
            assert info is not None, (cmd.name, param.name)  # every parameter's declaration is found
            kind = getattr(annotation, "__name__", str(annotation))
            kind = "Path" if kind.endswith("Path") else ("list[str]" if "list" in kind else kind)
            typers = type(param).process_value.__get__(param)
            assert param.process_value != typers
            fast += 1
            for value in SAMPLES[kind] + [None, param.default]:
                assert _outcome(param.process_value, ctx, value) == _outcome(typers, ctx, value), \
                    (cmd.name, param.name, value)
                checked += 1
    assert fast > 50 and checked > 500


def test_an_unset_or_plain_value_builds_no_pydantic_adapter() -> None:
    probe = ("import sys; from gpuctl.cli.main import run\n"
             "code = run(['-o', 'json', 'mig', 'validate', '3g.20gb-2x2g.10gb', '--gpu', 'a100-40gb'])\n"
             "print(code, 'pydantic' in sys.modules)")
    proc = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, timeout=60, cwd=ROOT)
    assert proc.stdout.strip().splitlines()[-1] == "0 False", proc.stdout + proc.stderr


# --- typer's public names only: pyproject.toml admits typer up to its next major release -----------------

PUBLIC_CORE = {"TyperGroup", "TyperCommand"}  # named by typer's documented `cls=` parameter


def test_no_module_uses_a_private_typer_name() -> None:
    """No import of typer._*, typer.main or typer.core (other than the two classes `Typer(cls=...)` names), and no
    attribute path through them, in gpuctl, its tests or its benchmarks."""
    import ast

    found = []
    for path in [*ROOT.glob("gpuctl/**/*.py"), *ROOT.glob("tests/**/*.py"), *ROOT.glob("bench/**/*.py")]:
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            names: list[str] = []
            if isinstance(node, ast.Import):
                names = [alias.name for alias in node.names]
            elif isinstance(node, ast.ImportFrom) and node.module:
                names = [f"{node.module}.{alias.name}" for alias in node.names]
            elif isinstance(node, ast.Attribute) and isinstance(node.value, ast.Attribute) \
                    and isinstance(node.value.value, ast.Name) and node.value.value.id == "typer":
                names = [f"typer.{node.value.attr}.{node.attr}"]
            for name in names:
                assert isinstance(node, (ast.stmt, ast.expr))  # an import or an attribute: it has a line
                parts = name.split(".")
                if parts[0] == "typer" and len(parts) > 1 and (parts[1].startswith("_") or (
                        parts[1] in ("main", "core") and not (len(parts) == 3 and parts[2] in PUBLIC_CORE))):
                    found.append(f"{path.relative_to(ROOT)}:{node.lineno}: {name}")
    assert found == []


def test_installed_typer_is_one_that_pyproject_admits() -> None:
    """A typer outside the range (a venv upgraded by hand) fails here first: run this file and tests/unit's help and
    error tests on it, then move the bound in pyproject.toml."""
    import re
    from importlib.metadata import version

    from packaging.requirements import Requirement

    [typer] = [Requirement(r) for r in re.findall(r'^\s*"(typer\b[^"]*)"', (ROOT / "pyproject.toml").read_text(), re.M)]
    assert typer.specifier.contains(version("typer")), (version("typer"), str(typer))
    assert [s.operator for s in typer.specifier if s.operator == "<"], "no upper bound: the next typer is unchecked"


# --- help served from the cache --------------------------------------------------------------------

ENTRY_PROBE = """
import sys
sys.argv = ["gpuctl", *sys.argv[1:]]
from gpuctl.cli import entry
try:
    entry.main()
except SystemExit as exit:
    print("EXIT=" + str(exit.code), file=sys.stderr)
print("TYPER=" + str("typer" in sys.modules), file=sys.stderr)
"""


def _entry(args: list[str], env: dict[str, str]) -> tuple[str, list[str]]:
    proc = subprocess.run([sys.executable, "-c", ENTRY_PROBE, *args], capture_output=True, text=True, env=env,
                          timeout=60)
    return proc.stdout, proc.stderr.strip().splitlines()[-2:]


def _typer_help(args: list[str], env: dict[str, str]) -> str:
    return subprocess.run([sys.executable, "-c", f"from gpuctl.cli.main import run; run({args!r})"],
                          capture_output=True, text=True, env=env, timeout=60).stdout


@pytest.fixture
def env(tmp_path: Path) -> dict[str, str]:
    return dict(os.environ, GPUCTL_CACHE_DIR=str(tmp_path / "cache"), COLUMNS="80")


@pytest.mark.slow  # Python processes timing gpuctl's start-up
def test_root_help_is_rendered_by_typer_once_then_served_without_it(env: dict[str, str]) -> None:
    runs = [_entry(["--help"], env) for _ in range(2)]
    assert [r[1] for r in runs] == [["EXIT=0", "TYPER=True"], ["EXIT=0", "TYPER=False"]]
    assert runs[0][0] == runs[1][0] == _typer_help(["--help"], env)
    assert "cluster" in runs[1][0] and "--kubeconfig" in runs[1][0]


@pytest.mark.slow  # Python processes timing gpuctl's start-up
def test_every_subcommand_help_is_served_from_one_render(env: dict[str, str]) -> None:
    assert _entry(["mig", "--help"], env)[1] == ["EXIT=0", "TYPER=True"]  # renders every help
    for args in (["cluster", "create", "--help"], ["tenant", "add", "-h"], ["nodegroup", "--help"],
                 ["-h"], ["sim", "install", "--help"], ["gpus", "--help"]):
        out, tail = _entry(args, env)
        assert tail == ["EXIT=0", "TYPER=False"], args
        assert out == _typer_help(args, env), args
        assert out.startswith(f"Usage: gpuctl {' '.join(args[:-1])}".rstrip()), args


@pytest.mark.slow  # Python processes timing gpuctl's start-up
def test_what_is_not_a_command_path_is_left_to_typer(env: dict[str, str]) -> None:
    _entry(["--help"], env)
    out, tail = _entry(["nosuch", "--help"], env)
    assert (out, tail) == ("", ["EXIT=2", "TYPER=True"])
    # an argument or an option before --help: typer answers (the same help, not from the cache)
    assert _entry(["mig", "validate", "1g.5gb", "--help"], env)[1] == ["EXIT=0", "TYPER=True"]
    assert _entry(["cluster", "create", "--gpu", "t4", "--help"], env)[1] == ["EXIT=0", "TYPER=True"]


@pytest.mark.slow  # Python processes timing gpuctl's start-up
def test_help_follows_the_width(env: dict[str, str]) -> None:
    narrow = dict(env, COLUMNS="60")
    _entry(["--help"], env)
    out, tail = _entry(["cluster", "create", "--help"], narrow)
    assert tail == ["EXIT=0", "TYPER=True"]  # another width: rendered again
    assert out == _typer_help(["cluster", "create", "--help"], narrow)
    assert max(map(len, out.splitlines())) <= 58
    assert _entry(["cluster", "create", "--help"], narrow)[1] == ["EXIT=0", "TYPER=False"]
    assert _entry(["cluster", "create", "--help"], env)[1] == ["EXIT=0", "TYPER=False"]  # 80 kept


@pytest.mark.slow  # Python processes timing gpuctl's start-up
def test_without_a_writable_cache_typer_answers_every_time(tmp_path: Path) -> None:
    (tmp_path / "file").write_text("")
    env = dict(os.environ, GPUCTL_CACHE_DIR=str(tmp_path / "file" / "cache"), COLUMNS="80")  # cannot be made
    for _ in range(2):
        out, tail = _entry(["tenant", "add", "--help"], env)
        assert tail == ["EXIT=0", "TYPER=True"]
        assert out == _typer_help(["tenant", "add", "--help"], env)


@pytest.mark.slow  # Python processes timing gpuctl's start-up
def test_a_read_only_cache_that_holds_the_help_still_serves_it(env: dict[str, str]) -> None:
    _entry(["--help"], env)
    help_dir = Path(env["GPUCTL_CACHE_DIR"]) / "help"
    for path in help_dir.iterdir():
        path.chmod(0o444)
    help_dir.chmod(0o555)
    try:
        assert _entry(["cluster", "--help"], env)[1] == ["EXIT=0", "TYPER=False"]
    finally:
        help_dir.chmod(0o755)


@pytest.mark.slow  # Python processes timing gpuctl's start-up
def test_a_torn_or_foreign_cache_file_is_rendered_again(env: dict[str, str]) -> None:
    _entry(["--help"], env)
    [path] = (Path(env["GPUCTL_CACHE_DIR"]) / "help").iterdir()
    path.write_text("another key\0\0stale help")
    out, tail = _entry(["--help"], env)
    assert tail == ["EXIT=0", "TYPER=True"] and out == _typer_help(["--help"], env)


def test_the_cache_key_covers_version_python_typer_and_every_module(tmp_path: Path,
                                                                    monkeypatch: pytest.MonkeyPatch) -> None:
    from gpuctl.cli import entry

    key = entry.help_key()
    assert entry.__version__ in key and hex(sys.hexversion) in key and "typer:" in key
    assert "/cli/main.py:" in key and "/stack/values.py:" in key and "/catalog.py:" in key
    monkeypatch.setattr(entry, "__version__", "0.0.0-test")
    assert entry.help_key() != key
    monkeypatch.undo()
    package = tmp_path / "gpuctl"
    (package / "cli").mkdir(parents=True)
    (package / "cli" / "gpus.py").write_text("a")
    monkeypatch.setattr(entry, "_PACKAGE", str(package))
    before = entry.help_key()
    (package / "cli" / "gpus.py").write_text("ab")  # an edit: another size (and mtime)
    assert entry.help_key() != before
    assert entry.help_file(before, 78) != entry.help_file(entry.help_key(), 78)
    assert entry.help_file(before, 78) != entry.help_file(before, 58)


def test_help_width_is_clicks(monkeypatch: pytest.MonkeyPatch) -> None:
    from gpuctl.cli import entry

    for columns, width in (("100", 78), ("80", 78), ("60", 58), ("40", 50), ("1", 50)):
        monkeypatch.setenv("COLUMNS", columns)  # restored after the test, whether COLUMNS was set or not
        assert entry.help_width() == width, columns


def test_help_path() -> None:
    from gpuctl.cli.entry import help_path

    assert help_path(["--help"]) == ""
    assert help_path(["cluster", "create", "-h"]) == "cluster create"
    assert help_path(["cluster", "create", "--gpu", "t4", "--help"]) is None
    assert help_path(["cluster create", "--help"]) is None
    assert help_path(["cluster", "create"]) is None
    assert help_path([]) is None


@pytest.mark.parametrize("variables", [{}, {"XDG_CACHE_HOME": "/x/cache"}, {"XDG_CACHE_HOME": ""},
                                       {"GPUCTL_CACHE_DIR": "/y"}, {"HOME": "/home/z"}])
def test_entry_finds_the_cache_where_gpuctl_paths_does(variables: dict[str, str],
                                                       monkeypatch: pytest.MonkeyPatch) -> None:
    """One rule (gpuctl.util.files.cache_root): the help cache lies in the directory the tools cache does."""
    from gpuctl.cli.entry import help_file
    from gpuctl.util.paths import cache_dir

    for name in ("XDG_CACHE_HOME", "GPUCTL_CACHE_DIR"):
        monkeypatch.delenv(name, raising=False)
    for name, value in variables.items():
        monkeypatch.setenv(name, value)
    expected = Path(variables.get("GPUCTL_CACHE_DIR") or Path(variables.get("XDG_CACHE_HOME") or
                                                              Path.home() / ".cache") / "gpuctl")
    assert cache_dir() == expected
    assert Path(help_file("key", 78)).parent == expected / "help"


def test_the_python_api_is_import_gpuctl() -> None:
    """gpuctl.<name> is gpuctl.api.<name> for every name of api.__all__ (the one list), and nothing else is."""
    import gpuctl
    import gpuctl.api

    assert {"apply_platform", "plan_platform", "PlatformSpec"} <= set(gpuctl.api.__all__)
    for name in gpuctl.api.__all__:
        assert getattr(gpuctl, name) is getattr(gpuctl.api, name), name
    for name in ("nosuch", "Path", "_API", "__wrapped__"):  # Path: imported by api.py, not in __all__
        assert not hasattr(gpuctl, name), name


def test_a_submodule_import_does_not_load_the_api() -> None:
    probe = ("import sys; import gpuctl; from gpuctl import model; from gpuctl.model import labels; "
             "import gpuctl.util.paths; print(gpuctl.model.__name__, 'gpuctl.api' in sys.modules, hasattr(gpuctl, 'cli'))")
    proc = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, timeout=60, cwd=ROOT)
    assert proc.stdout.split() == ["gpuctl.model", "False", "False"], proc.stdout + proc.stderr
