"""The walls: the layer contracts in pyproject.toml (import-linter), no import circle, small modules.

Imports inside functions count: grimp, import-linter's graph builder, reads every import statement."""

from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path

import grimp

ROOT = Path(__file__).resolve().parents[2]
LINT_IMPORTS = Path(sys.executable).parent / "lint-imports"
MAX_LINES = 600


def _lint_imports(cwd: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run([str(LINT_IMPORTS), "--no-cache"], cwd=cwd, capture_output=True, text=True, timeout=300,
                          env={"PATH": "/usr/bin:/bin", "PYTHONPATH": str(cwd)})


def test_the_layer_contracts_are_kept() -> None:
    proc = _lint_imports(ROOT)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "0 broken" in proc.stdout


def _copy_tree(tmp_path: Path) -> None:
    """gpuctl, bench, tests and pyproject.toml (import-linter's root packages and contracts) under tmp_path."""
    for package in ("gpuctl", "bench", "tests"):
        shutil.copytree(ROOT / package, tmp_path / package, ignore=shutil.ignore_patterns("__pycache__", "_data"))
    shutil.copy(ROOT / "pyproject.toml", tmp_path / "pyproject.toml")


def test_an_upward_import_breaks_the_build(tmp_path: Path) -> None:
    """A model module importing the CLI (the layer at the top) fails the contract, naming both."""
    _copy_tree(tmp_path)
    catalog = tmp_path / "gpuctl" / "model" / "catalog.py"
    catalog.write_text(catalog.read_text() + "\n\ndef _shortcut() -> None:\n    from gpuctl.cli import main  # noqa\n")
    proc = _lint_imports(tmp_path)
    assert proc.returncode != 0
    assert "gpuctl.model is not allowed to import gpuctl.cli" in proc.stdout, proc.stdout


def test_a_benchmark_reaching_below_the_api_breaks_the_build(tmp_path: Path) -> None:
    """A benchmark importing a lower layer itself, not through bench.support, fails its contract."""
    _copy_tree(tmp_path)
    create = tmp_path / "bench" / "create.py"
    create.write_text(create.read_text() + "\n\ndef _shortcut() -> None:\n    from gpuctl.kube import client  # noqa\n")
    proc = _lint_imports(tmp_path)
    assert proc.returncode != 0
    assert "bench.create -> gpuctl.kube.client" in proc.stdout, proc.stdout


def test_an_integration_test_reaching_below_the_api_breaks_the_build(tmp_path: Path) -> None:
    """An integration test importing an operation itself, not through tests.support, fails the tests' contract,
    naming the import; tests.support's own imports below the API are what the contract lets through."""
    _copy_tree(tmp_path)
    quickstart = tmp_path / "tests" / "integration" / "test_quickstart.py"
    quickstart.write_text(quickstart.read_text() + "\n\ndef _shortcut() -> None:\n    from gpuctl.ops import status  # noqa\n")
    proc = _lint_imports(tmp_path)
    assert proc.returncode != 0
    assert "the tests use gpuctl.api and tests.support BROKEN" in proc.stdout, proc.stdout
    assert "tests.integration.test_quickstart -> gpuctl.ops.status" in proc.stdout, proc.stdout
    assert "tests.support." not in proc.stdout.split("Broken contracts")[-1], proc.stdout  # its own imports pass


def test_the_simulator_outside_the_sim_provider_breaks_the_build(tmp_path: Path) -> None:
    """Another provider reaching gpuctl.simulator (which the layers allow: providers sit above it) fails the sim
    contract, naming the import; the sim provider's own imports of it are what the contract lets through."""
    _copy_tree(tmp_path)
    eks = tmp_path / "gpuctl" / "providers" / "eks" / "provider.py"
    eks.write_text(eks.read_text() + "\n\ndef _shortcut() -> None:\n    from gpuctl.simulator import kwok  # noqa\n")
    proc = _lint_imports(tmp_path)
    assert proc.returncode != 0
    assert "only the sim provider uses gpuctl.simulator BROKEN" in proc.stdout, proc.stdout
    assert "gpuctl.providers.eks.provider -> gpuctl.simulator.kwok" in proc.stdout, proc.stdout
    assert "gpuctl.providers.sim" not in proc.stdout.split("Broken contracts")[-1], proc.stdout


def test_the_kubernetes_package_outside_gpuctl_kube_breaks_the_build(tmp_path: Path) -> None:
    """An operation importing the kubernetes package itself, not through the door (gpuctl.kube's Kube), fails the
    contract, naming the import; gpuctl.kube's own imports of it are what the contract lets through."""
    _copy_tree(tmp_path)
    status = tmp_path / "gpuctl" / "ops" / "status.py"
    status.write_text(status.read_text() + "\n\ndef _shortcut() -> None:\n    from kubernetes import client  # noqa\n")
    proc = _lint_imports(tmp_path)
    assert proc.returncode != 0
    assert "only gpuctl.kube imports the kubernetes package BROKEN" in proc.stdout, proc.stdout
    assert "gpuctl.ops.status -> kubernetes" in proc.stdout, proc.stdout
    assert "gpuctl.kube." not in proc.stdout.split("Broken contracts")[-1], proc.stdout


def _cycles(graph: grimp.ImportGraph) -> list[list[str]]:
    """The strongly connected components of more than one module (Tarjan, iterative)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: list[list[str]] = []
    for start in sorted(graph.modules):
        if start in index:
            continue
        work = [(start, iter(sorted(graph.find_modules_directly_imported_by(start))))]
        index[start] = low[start] = len(index)
        stack.append(start)
        on_stack.add(start)
        while work:
            node, children = work[-1]
            child = next(children, None)
            if child is not None:
                if child not in index:
                    index[child] = low[child] = len(index)
                    stack.append(child)
                    on_stack.add(child)
                    work.append((child, iter(sorted(graph.find_modules_directly_imported_by(child)))))
                elif child in on_stack:
                    low[node] = min(low[node], index[child])
                continue
            work.pop()
            if work:
                low[work[-1][0]] = min(low[work[-1][0]], low[node])
            if low[node] == index[node]:
                component = []
                while True:
                    member = stack.pop()
                    on_stack.discard(member)
                    component.append(member)
                    if member == node:
                        break
                if len(component) > 1:
                    found.append(sorted(component))
    return found


def test_no_import_circles() -> None:
    assert _cycles(grimp.build_graph("gpuctl", cache_dir=None)) == []


def test_the_cycle_finder_finds_one() -> None:
    graph = grimp.ImportGraph()
    for a, b in (("p.a", "p.b"), ("p.b", "p.c"), ("p.c", "p.a"), ("p.c", "p.d")):
        graph.add_import(importer=a, imported=b)
    assert _cycles(graph) == [["p.a", "p.b", "p.c"]]


def test_modules_are_small() -> None:
    long = {str(p.relative_to(ROOT)): n for p in (ROOT / "gpuctl").rglob("*.py")
            if (n := len(p.read_text().splitlines())) > MAX_LINES}
    assert long == {}
