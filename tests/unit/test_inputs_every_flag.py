"""Every flag and argument that takes a value, of every command, found by walking the CLI itself, is
judged before the first cloud, cluster or file-system write: hostile values (a 5,000-digit number, a
negative one, an empty string, a path under /proc/nonexistent, a file where a directory is wanted and the
other way round) exit 2 with one line naming the flag, no traceback, nothing created.

Each command runs in-process (gpuctl.cli.main.run, as the console script does) against an environment
where nothing answers: the kubeconfig's server is 127.0.0.1:1 and every proxy points there, so a value
judged late shows as exit 1, 5 or 7, not 2. A flag this file does not know how to feed fails the test."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from gpuctl.cli import main, types
from gpuctl.cli.lazy import declared
from gpuctl.cli.main import COMMANDS

GOOD = Path(__file__).resolve().parents[1] / "specs" / "good.yaml"
HUGE = "9" * 5000

# Per command: its arguments and options making a line that passes every check and then reaches the
# cluster or cloud (or, for pure commands, succeeds). "{out}" is a fresh directory to render into.
BASE: dict[str, tuple[list[str], list[str]]] = {
    "apply": ([], ["-f", str(GOOD)]),
    "plan": ([], ["-f", str(GOOD)]),
    "render": ([], ["-f", str(GOOD), "--out", "{out}"]),
    "gpus": ([], []),
    "status": ([], []),
    "validate": ([], []),
    "doctor": ([], []),
    "top": ([], ["--prometheus", "http://127.0.0.1:1"]),
    "advise": ([], ["--prometheus", "http://127.0.0.1:1"]),
    "cluster create": ([], ["--cloud", "sim", "--gpu", "t4"]),
    "cluster list": ([], ["--cloud", "sim"]),
    "cluster delete": ([], ["--name", "demo", "--yes"]),
    "nodegroup add": ([], ["--cluster", "demo", "--name", "ng", "--gpu", "t4"]),
    "nodegroup scale": ([], ["--cluster", "demo", "--name", "ng", "--nodes", "2"]),
    "nodegroup delete": ([], ["--cluster", "demo", "--name", "ng", "--yes"]),
    "nodegroup list": ([], ["--cluster", "demo"]),
    "mig validate": (["all-balanced"], ["--gpu", "a100-40gb"]),
    "mig plan": (["all-balanced"], ["--gpu", "a100-40gb"]),
    "mig apply": (["all-balanced"], ["--nodegroup", "gpu"]),
    "sim install": ([], []),
    "tenant add": (["team-a"], []),
    "tenant list": ([], []),
    "tenant remove": (["team-a"], ["--yes"]),
}
# The global options are judged once for every command: fed through commands that read, write or ignore them.
GLOBAL_CARRIERS = ("gpus", "status", "cluster create", "apply", "render", "cluster delete", "tenant list")
# What each path flag names: a file read (input), a file read or written (file), a directory written into (dir).
PATH_KINDS = {"--kubeconfig": "file", "--filename": "input", "--out": "dir"}
PATHY_NAMES = {"--kubeconfig", "-f", "--filename", "--out", "--file", "--dir", "--path"}


def _descriptor(param: Any) -> tuple[Any, Any]:
    """(annotation, parser) of a typer parameter; click's type where typer does not say."""
    annotation, info = declared(param)
    if info is not None:
        return annotation, info.parser
    click_type = getattr(param, "type", None)
    return getattr(click_type, "name", None), getattr(click_type, "func", None)


def kind_of(param: Any) -> str:
    """number, path or text: how a value-taking parameter is fed."""
    annotation, parser = _descriptor(param)
    if parser is types.path or annotation in (Path, "path") or set(param.opts) & PATHY_NAMES:
        return "path"
    if parser in (types.count, types.seconds) or annotation in (int, float, "integer", "float"):
        return "number"
    return "text"


def takes_value(param: Any) -> bool:
    return not (getattr(param, "is_flag", False) or getattr(param, "count", False))


def flag_of(param: Any) -> str:
    """The name an error must show: the long option, or an argument's metavar (LAYOUT, NAME)."""
    if param.param_type_name == "argument":
        return param.name.upper()
    return max(param.opts, key=len)


def walk(command: Any, path: list[str]) -> list[tuple[str, Any]]:
    commands = getattr(command, "commands", None)
    if commands is None:
        return [(" ".join(path), command)]
    return [leaf for name in list(commands) for leaf in walk(commands[name], [*path, name])]


def leaf_commands() -> list[tuple[str, Any]]:
    return [leaf for name in COMMANDS for leaf in walk(main.command([name]).commands[name], [name])]


def root_params() -> list[Any]:
    return [p for p in main.command([]).params if takes_value(p)]


def hostile_values(param: Any) -> list[tuple[str, str]]:
    """(case id, value); a path's value may name '{file}' (an existing regular file) or '{dir}'."""
    kind = kind_of(param)
    if kind == "number":
        return [("5000 digits", HUGE), ("negative", "-1"), ("empty", ""), ("nan", "nan")]
    if kind == "text":
        return [("empty", "")]
    where = PATH_KINDS.get(flag_of(param))
    if where is None:
        return [("unknown path kind", "")]
    values = [("empty", ""), ("under /proc/nonexistent", "/proc/nonexistent/dir/x")]
    if where == "dir":
        return [*values, ("a file for a directory", "{file}"), ("a file as parent", "{file}/sub")]
    return [*values, ("a directory for a file", "{dir}"), ("a file as parent", "{file}/sub/x")]


def cases() -> list[Any]:
    found = []
    for command, leaf in leaf_commands():
        arguments = [p for p in leaf.params if p.param_type_name == "argument"]
        assert len(arguments) <= 1, f"{command}: feed each of several arguments"
        for param in leaf.params:
            if takes_value(param):
                found += [pytest.param(command, False, param, value, id=f"{command} {flag_of(param)} {name}")
                          for name, value in hostile_values(param)]
    for param in root_params():
        found += [pytest.param(command, True, param, value, id=f"{command} {flag_of(param)} {name}")
                  for command in GLOBAL_CARRIERS for name, value in hostile_values(param)]
    return found


def names_flag(line: str, param: Any) -> bool:
    """The error line names the parameter: 'error: --nodes: ...', 'LAYOUT: ...'."""
    names = [flag_of(param), *param.opts]
    return any(line.startswith(f"error: {n}:") or f"'{n}'" in line or f"{n}:" in line for n in names)


@pytest.fixture
def nowhere(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """An environment in which nothing answers and everything gpuctl could make lies under tmp_path."""
    kube = tmp_path / "kube"
    kube.mkdir()
    (kube / "config").write_text(
        "apiVersion: v1\nkind: Config\nclusters: [{name: c, cluster: {server: 'https://127.0.0.1:1'}}]\n"
        "users: [{name: u, user: {token: x}}]\ncontexts: [{name: c, context: {cluster: c, user: u}}]\n"
        "current-context: c\n")
    for name, value in {"GPUCTL_STATE_DIR": tmp_path / "state", "GPUCTL_CACHE_DIR": tmp_path / "cache",
                        "KUBECONFIG": kube / "config", "HOME": tmp_path / "home", "PATH": "/usr/bin:/bin",
                        "GPUCTL_SITE_CONFIG": tmp_path / "site.yaml", "AWS_ENDPOINT_URL": "http://127.0.0.1:1",
                        "HTTPS_PROXY": "http://127.0.0.1:1", "HTTP_PROXY": "http://127.0.0.1:1",
                        "https_proxy": "http://127.0.0.1:1", "http_proxy": "http://127.0.0.1:1",
                        "GOPROXY": "off", "GPUCTL_REQUEST_TIMEOUT": "2"}.items():
        monkeypatch.setenv(name, str(value))
    for name in ("NO_PROXY", "no_proxy", "GPUCTL_DEBUG", "OS_CLOUD", "AWS_PROFILE"):
        monkeypatch.delenv(name, raising=False)
    (tmp_path / "regular-file").write_text("x\n")
    (tmp_path / "a-directory").mkdir()
    return tmp_path


def command_line(command: str, root: Path, param: Any = None, value: str | None = None,
                 is_global: bool = False) -> list[str]:
    """BASE of `command` with `param` given `value` (replacing a value BASE gives it)."""
    arguments, options = BASE[command]
    arguments, options = list(arguments), list(options)
    prefix: list[str] = []
    if param is not None and value is not None and param.param_type_name == "argument":
        arguments = [value]
    elif param is not None and value is not None:
        for opt in param.opts:
            while opt in options:
                at = options.index(opt)
                del options[at:at + 2]
        given = [max(param.opts, key=len), value]
        if is_global:
            prefix = given
        else:
            options += given
    fill = {"{out}": str(root / "out"), "{file}": str(root / "regular-file"), "{dir}": str(root / "a-directory")}
    words = [*prefix, *command.split(), *arguments, *options]
    for key, path in fill.items():
        words = [word.replace(key, path) for word in words]
    return words


def run_in_process(args: list[str], capsys: pytest.CaptureFixture[str]) -> tuple[int, str, str]:
    from gpuctl.cli.main import run

    capsys.readouterr()
    code = run(args)
    out, err = capsys.readouterr()
    return code, out, err


def made(root: Path) -> set[str]:
    return {str(p.relative_to(root)) for p in root.rglob("*")}


@pytest.mark.parametrize("command,is_global,param,value", cases())
@pytest.mark.slow  # 230 command lines, each parsed and run in process
def test_a_hostile_value_exits_2_naming_the_flag_before_anything_is_made(
        command: str, is_global: bool, param: Any, value: str, nowhere: Path,
        capsys: pytest.CaptureFixture[str]) -> None:
    if command not in BASE:
        pytest.fail(f"no command line for {command!r}: add it to BASE so its flags are fed hostile values")
    if kind_of(param) == "path" and flag_of(param) not in PATH_KINDS:
        pytest.fail(f"{command} {flag_of(param)}: a path flag of unknown kind; add it to PATH_KINDS")
    before = made(nowhere)
    code, out, err = run_in_process(command_line(command, nowhere, param, value, is_global), capsys)
    lines = err.strip().splitlines()
    assert code == 2, (code, err[-2000:])
    assert len(lines) == 1 and lines[0].startswith("error: "), err[-2000:]
    assert names_flag(lines[0], param), lines[0]
    assert "Traceback" not in err and out == ""
    assert made(nowhere) == before, made(nowhere) - before  # nothing created, installed or started


@pytest.mark.parametrize("command", sorted(BASE))
def test_each_base_line_passes_the_checks(command: str, nowhere: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """The base lines are sound: an exit 2 above is the fed value's, not the line's. A command whose base
    reaches nothing that answers ends 1 (tools), 5 (cluster) or 0; one whose cluster does not exist ends 2
    with 'not found', which names no flag."""
    code, _, err = run_in_process(command_line(command, nowhere), capsys)
    assert code in (0, 1, 5) or (code == 2 and "not found" in err), (code, err[-2000:])


def test_every_command_and_value_taking_parameter_is_fed() -> None:
    """A new command or flag cannot escape: each command has a base line, each path flag a kind, and each
    number and path goes through the strict parsers of gpuctl.cli.types."""
    leaves = dict(leaf_commands())
    assert set(leaves) == set(BASE), set(leaves) ^ set(BASE)
    for command, leaf in [*leaves.items(), ("(global)", None)]:
        params = leaf.params if leaf is not None else root_params()
        for param in params:
            if not takes_value(param):
                continue
            _, parser = _descriptor(param)
            kind = kind_of(param)
            if kind == "number":
                assert parser in (types.count, types.seconds), \
                    f"{command} {flag_of(param)}: parse with types.count or types.seconds"
            if kind == "path":
                assert flag_of(param) in PATH_KINDS, f"{command} {flag_of(param)}: add its kind to PATH_KINDS"
                assert parser is types.path, f"{command} {flag_of(param)}: parse with types.path"
