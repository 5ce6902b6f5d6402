"""pyproject.toml [project].dependencies names every distribution that gpuctl imports, and nothing else:
a module that is only there because another dependency pulls it in (rich through typer, botocore through
boto3, urllib3 through kubernetes) would go when that one stops needing it."""

from __future__ import annotations

import ast
import re
import sys
from importlib.metadata import packages_distributions
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]


def _normal(name: str) -> str:
    return re.sub(r"[-_.]+", "-", name).lower()


def _declared() -> set[str]:
    try:
        import tomllib
    except ImportError:  # Python 3.10
        pytest.skip("reads pyproject.toml with tomllib (Python 3.11+)")
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    return {_normal(re.split(r"[^A-Za-z0-9._-]", spec, maxsplit=1)[0]) for spec in project["dependencies"]}


def _imported() -> dict[str, set[str]]:
    """Top-level module -> the gpuctl files importing it (at any depth: imports inside functions count)."""
    found: dict[str, set[str]] = {}
    for path in sorted((ROOT / "gpuctl").rglob("*.py")):
        for node in ast.walk(ast.parse(path.read_text(), filename=str(path))):
            if isinstance(node, ast.Import):
                names = [alias.name for alias in node.names]
            elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
                names = [node.module]
            else:
                continue
            for name in names:
                top = name.split(".")[0]
                if top != "gpuctl" and top not in sys.stdlib_module_names:
                    found.setdefault(top, set()).add(str(path.relative_to(ROOT)))
    return found


def test_every_imported_distribution_is_declared_and_every_declared_one_imported() -> None:
    declared, imported, owners = _declared(), _imported(), packages_distributions()
    assert {"typer", "yaml", "kubernetes"} <= imported.keys()  # the scan sees imports inside functions too
    distributions = {module: {_normal(d) for d in owners.get(module, [])} for module in imported}
    assert [m for m, d in distributions.items() if not d] == [], "imported, but from no installed distribution"
    undeclared = {m: sorted(imported[m]) for m, d in distributions.items() if not d & declared}
    assert undeclared == {}, "add these to [project].dependencies"
    used = set().union(*distributions.values())
    assert sorted(declared - used) == [], "declared, but gpuctl imports nothing from these"
