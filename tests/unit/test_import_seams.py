"""A module's head says what it depends on: gpuctl's own modules are imported at module level, except at a few
named lazy seams (issue 29, point 4). Heavy third-party SDKs are not counted here: they load through
gpuctl/util/lazy_import.py's LazyImport at module head (tests/unit/test_lazy_imports.py holds start-up light).

SEAMS lists every function-level import of a gpuctl module that is meant to stay, with its reason; each such
line carries a `# lazy seam: <why>` comment. Two seams load a module by name, out of this count's sight:
gpuctl/cli/main.py's make_app (the CLI -> command-module seam) and gpuctl/__init__.__getattr__ (gpuctl.api at
the first `gpuctl.<name>`, which is how the CLI's command modules call the API: gpuctl/cli/__init__.py).
NOT_YET_MOVED is the allowance of the parts still being reworked (api.py): a ceiling per file that only
goes down. Lower or drop an entry when its part is done; a file not listed there may not gain a function-level
gpuctl import without a SEAMS entry."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
PACKAGE = ROOT / "gpuctl"

# (module, imported module) -> why it is imported inside a function
SEAMS: dict[tuple[str, str], str] = {
    ("gpuctl/cli/entry.py", "gpuctl.cli.main"):
        "typer and every command module load only after --version and the help cache could not answer",
    ("gpuctl/model/site.py", "gpuctl.model.strict_yaml"):
        "its loader subclasses PyYAML's; `gpus` and `mig` read no site.yaml unless it exists",
    ("gpuctl/providers/__init__.py", "gpuctl.providers.eks.karpenter"):
        "only the chosen cloud's provider package loads (an eks spec renders without the simulator)",
    ("gpuctl/providers/__init__.py", "gpuctl.providers.sim.karpenter"):
        "only the chosen cloud's provider package loads (a sim spec renders without the EKS provider)",
}

# Not yet moved to the module head (others rework these files): at most this many function-level gpuctl
# imports per file (per folder for a key ending in /). Lower an entry as its file is done, drop it at 0; the goal is SEAMS alone.
NOT_YET_MOVED: dict[str, int] = {
    "gpuctl/api.py": 48,
}


def _imported(node: ast.Import | ast.ImportFrom, module: str) -> list[str]:
    """The gpuctl modules `node` imports ([] for anything else); a relative import is resolved against `module`."""
    if isinstance(node, ast.Import):
        return [a.name for a in node.names if a.name.split(".")[0] == "gpuctl"]
    if node.level:
        base = module.split(".")[:-node.level]
        return [".".join([*base, node.module] if node.module else base)]
    return [node.module] if node.module and node.module.split(".")[0] == "gpuctl" else []


def function_level_imports(path: Path) -> list[tuple[int, str]]:
    """(line, imported gpuctl module) of every import inside a function body of `path`."""
    module = ".".join(path.relative_to(ROOT).with_suffix("").parts).removesuffix(".__init__")
    found: set[tuple[int, str]] = set()
    for fn in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(fn, (ast.FunctionDef, ast.AsyncFunctionDef)):
            for node in ast.walk(fn):
                if isinstance(node, (ast.Import, ast.ImportFrom)):
                    found.update((node.lineno, name) for name in _imported(node, module))
    return sorted(found)


def all_function_level_imports() -> dict[str, list[tuple[int, str]]]:
    return {str(p.relative_to(ROOT)): imports for p in sorted(PACKAGE.rglob("*.py"))
            if (imports := function_level_imports(p))}


def test_every_function_level_gpuctl_import_is_a_named_seam_or_not_yet_moved() -> None:
    found = all_function_level_imports()
    new = [f"{path}:{line}: {name}" for path, imports in found.items() if _allowance(path) is None
           for line, name in imports if (path, name) not in SEAMS]
    assert new == [], ("import these at the module head (a heavy SDK through gpuctl.util.lazy_import.LazyImport), "
                       "or name the seam in SEAMS with its reason")
    counts = {key: sum(len(imports) for path, imports in found.items() if _allowance(path) == key)
              for key in NOT_YET_MOVED}
    over = {key: (counts[key], most) for key, most in NOT_YET_MOVED.items() if counts[key] > most}
    assert over == {}, "(found, allowed): a part being reworked gained a function-level import"


def _allowance(path: str) -> str | None:
    """The NOT_YET_MOVED key that covers `path`: the file itself, or a folder above it."""
    return next((key for key in NOT_YET_MOVED if path == key or (key.endswith("/") and path.startswith(key))), None)


def test_each_seam_is_there_and_says_why() -> None:
    found = all_function_level_imports()
    for (path, name), reason in SEAMS.items():
        lines = (ROOT / path).read_text(encoding="utf-8").splitlines()
        at = [line for line, imported in found.get(path, []) if imported == name]
        assert at, f"{path} no longer imports {name} in a function: drop its SEAMS entry"
        for line in at:  # the comment on the import's line or on the line above it
            assert "# lazy seam:" in lines[line - 1] + lines[line - 2], f"{path}:{line}: no '# lazy seam:' comment"
        assert reason


def test_the_allowance_names_files_that_exist() -> None:
    assert [p for p in NOT_YET_MOVED if not (ROOT / p).is_file() and not (p.endswith("/") and (ROOT / p).is_dir())] == []
    assert all(not p.startswith(("gpuctl/kube/", "gpuctl/model/", "gpuctl/util/", "gpuctl/tools/", "gpuctl/stack/",
                                 "gpuctl/simulator/", "gpuctl/providers/", "gpuctl/cli/", "gpuctl/ops/"))
               for p in NOT_YET_MOVED), "those parts are done: a new import there is a seam or moves up"


@pytest.mark.parametrize("source, expected", [
    ("def f():\n    from gpuctl.util import errors\n", [(2, "gpuctl.util")]),
    ("def f():\n    import gpuctl.model.labels, json\n", [(2, "gpuctl.model.labels")]),
    ("def f():\n    def g():\n        from .labels import X\n", [(3, "gpuctl.model.labels")]),
    ("from gpuctl.util import errors\n\ndef f():\n    import yaml\n", []),
    ("class C:\n    def m(self):\n        from gpuctl.kube.kube import Kube\n", [(3, "gpuctl.kube.kube")]),
], ids=["from", "import", "nested-relative", "module-level-and-third-party", "method"])
def test_the_count_sees_every_kind_of_import(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, source: str,
                                             expected: list[tuple[int, str]]) -> None:
    package = tmp_path / "gpuctl" / "model"
    package.mkdir(parents=True)
    (package / "probe.py").write_text(source)
    monkeypatch.setitem(globals(), "ROOT", tmp_path)
    assert function_level_imports(package / "probe.py") == expected



def test_a_lazy_import_loads_at_first_use_and_names_a_missing_distribution() -> None:
    import subprocess
    import sys

    from gpuctl.util.errors import ExitCode, ToolError
    from gpuctl.util.lazy_import import LazyImport

    probe = ("import sys; from gpuctl.util.lazy_import import LazyImport; m = LazyImport('colorsys'); "
             "print('colorsys' in sys.modules, m.rgb_to_hsv(1, 0, 0), 'colorsys' in sys.modules)")
    proc = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, timeout=60, cwd=ROOT)
    assert proc.stdout.strip() == "False (0.0, 1.0, 1) True", proc.stdout + proc.stderr
    missing = LazyImport("gpuctl_no_such_sdk.client", "gpuctl-no-such-sdk")
    with pytest.raises(ToolError) as caught:
        missing.Client  # noqa: B018 - the attribute access is what imports
    assert caught.value.exit_code == ExitCode.FAILURE
    assert caught.value.one_line() == ("the Python package gpuctl-no-such-sdk is not installed (gpuctl needs "
                                       "gpuctl_no_such_sdk.client); reinstall gpuctl, or pip install gpuctl-no-such-sdk")
    assert not hasattr(missing, "__wrapped__")  # dunder probes (copy, inspect) load nothing and raise nothing else
