"""A module's head says what it depends on: gpuctl's own modules are imported at module level, except at a few
named lazy seams (issue 29, point 4). Heavy third-party SDKs are not counted here: they load through
gpuctl/util/lazy_import.py's LazyImport at module head (tests/unit/test_lazy_imports.py holds start-up light).

SEAMS lists every function-level import of a gpuctl module that is meant to stay, with its reason; each such
line carries a `# lazy seam: <why>` comment. Three seams load a module by name, out of this count's sight:
gpuctl/cli/main.py's make_app (the CLI -> command-module seam), gpuctl/__init__.__getattr__ (gpuctl.api's names
at the first `gpuctl.<name>`) and gpuctl/api/__init__.__getattr__ (each public name's module, from its one table
_WHERE, at the name's first use: the CLI's command modules import `from gpuctl import api` at their head, and a
command loads only the concern it calls). Any other function-level gpuctl import fails here: move it to the
module head (a heavy SDK through gpuctl.util.lazy_import.LazyImport) or name it in SEAMS."""

from __future__ import annotations

import ast
import subprocess
import sys
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

MOST = 20  # issue 29 point 4: under this many function-level gpuctl imports, each a named seam


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


def test_every_function_level_gpuctl_import_is_a_named_seam() -> None:
    found = all_function_level_imports()
    new = [f"{path}:{line}: {name}" for path, imports in found.items() for line, name in imports
           if (path, name) not in SEAMS]
    assert new == [], ("import these at the module head (a heavy SDK through gpuctl.util.lazy_import.LazyImport), "
                       "or name the seam in SEAMS with its reason")
    assert sum(len(imports) for imports in found.values()) < MOST


def test_each_seam_is_there_and_says_why() -> None:
    found = all_function_level_imports()
    for (path, name), reason in SEAMS.items():
        lines = (ROOT / path).read_text(encoding="utf-8").splitlines()
        at = [line for line, imported in found.get(path, []) if imported == name]
        assert at, f"{path} no longer imports {name} in a function: drop its SEAMS entry"
        for line in at:  # the comment on the import's line or on the line above it
            assert "# lazy seam:" in lines[line - 1] + lines[line - 2], f"{path}:{line}: no '# lazy seam:' comment"
        assert reason


def _type_checking_imports(path: Path) -> dict[str, str]:
    """name -> module of every `from M import name` under `if TYPE_CHECKING:` in `path`."""
    return {alias.asname or alias.name: str(imp.module) for node in ast.parse(path.read_text(encoding="utf-8")).body
            if isinstance(node, ast.If) and isinstance(node.test, ast.Name) and node.test.id == "TYPE_CHECKING"
            for imp in node.body if isinstance(imp, ast.ImportFrom) for alias in imp.names}


def test_the_api_package_loads_each_public_name_from_its_one_table() -> None:
    """gpuctl/api/__init__.py's seam: _WHERE maps every name of __all__ (and nothing else) to the module that
    defines it; mypy's imports under TYPE_CHECKING name the same modules; no concern module is named as a public
    name (a loaded submodule would shadow it); and importing the package loads none of them."""
    import importlib

    import gpuctl.api

    where = gpuctl.api._WHERE
    assert sorted(where) == sorted(gpuctl.api.__all__) and len(set(gpuctl.api.__all__)) == len(gpuctl.api.__all__)
    assert _type_checking_imports(PACKAGE / "api" / "__init__.py") == where
    for name, module in where.items():
        value = getattr(importlib.import_module(module), name)
        assert getattr(value, "__module__", module) == module, (name, module)  # defined there, not re-exported
    concerns = {p.stem for p in (PACKAGE / "api").glob("*.py")} - {"__init__"}
    assert {m.rsplit(".", 1)[1] for m in where.values() if m.startswith("gpuctl.api.")} <= concerns
    assert concerns & set(where) == set()
    probe = ("import sys, gpuctl.api; print(sorted(m for m in sys.modules if m.startswith('gpuctl')), "
             "'yaml' in sys.modules)")
    proc = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, timeout=60, cwd=ROOT)
    assert proc.stdout.strip() == "['gpuctl', 'gpuctl.api'] False", proc.stdout + proc.stderr


def test_a_public_name_loads_its_own_concern_only() -> None:
    probe = ("import sys, gpuctl; gpuctl.load_spec; print(sorted(m for m in sys.modules if m.startswith('gpuctl.api.') "
             "or m.startswith('gpuctl.ops')), gpuctl.api.load_spec is gpuctl.api.specs.load_spec)")
    proc = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, timeout=60, cwd=ROOT)
    assert proc.stdout.strip() == "['gpuctl.api.specs'] True", proc.stdout + proc.stderr


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
