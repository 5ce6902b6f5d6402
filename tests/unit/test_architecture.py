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
    """A model module importing the CLI (the layer at the top) fails the contract, naming both. (A tree of its own: an
    upward import makes every module above the model reach the CLI, which the other contracts would report too.)"""
    _copy_tree(tmp_path)
    catalog = tmp_path / "gpuctl" / "model" / "catalog.py"
    catalog.write_text(catalog.read_text() + "\n\ndef _shortcut() -> None:\n    from gpuctl.cli import main  # noqa\n")
    proc = _lint_imports(tmp_path)
    assert proc.returncode != 0
    assert "gpuctl.model is not allowed to import gpuctl.cli" in proc.stdout, proc.stdout


# One shortcut past each forbidden contract: (file it goes into, the import, the contract's line, the import
# lint-imports names, and the prefix of the imports the contract lets through, which must not be named).
SHORTCUTS = [
    ("bench/create.py", "from gpuctl.kube import client", "the benchmarks use gpuctl.api and bench.support BROKEN",
     "bench.create -> gpuctl.kube.client", "bench.support ->"),
    ("tests/integration/test_quickstart.py", "from gpuctl.ops import status",
     "the tests use gpuctl.api and tests.support BROKEN", "tests.integration.test_quickstart -> gpuctl.ops.status",
     "tests.support."),
    ("gpuctl/providers/eks/provider.py", "from gpuctl.simulator import kwok",
     "only the sim provider uses gpuctl.simulator BROKEN", "gpuctl.providers.eks.provider -> gpuctl.simulator.kwok",
     "gpuctl.providers.sim"),
    ("gpuctl/ops/status.py", "from kubernetes import client", "only gpuctl.kube imports the kubernetes package BROKEN",
     "gpuctl.ops.status -> kubernetes", "gpuctl.kube."),
]


def test_each_shortcut_past_a_contract_breaks_the_build(tmp_path: Path) -> None:
    """A benchmark or an integration test reaching below the API, another provider using the simulator, an operation
    importing the kubernetes package: each fails its contract, naming the import, while what the contract lets
    through (bench.support's, tests.support's, the sim provider's, gpuctl.kube's own imports) is not named. One copy
    of the tree carries all four: lint-imports reports every broken contract."""
    _copy_tree(tmp_path)
    for path, line, *_ in SHORTCUTS:
        module = tmp_path / path
        module.write_text(module.read_text() + f"\n\ndef _shortcut() -> None:\n    {line}  # noqa\n")
    proc = _lint_imports(tmp_path)
    assert proc.returncode != 0
    for _, _, contract, _, _ in SHORTCUTS:
        assert contract in proc.stdout, (contract, proc.stdout)
    broken = proc.stdout.split("Broken contracts")[-1]
    names = [contract.removesuffix(" BROKEN") for _, _, contract, _, _ in SHORTCUTS]
    starts = sorted(broken.index(name) for name in names)  # each contract's report, up to the next one's
    for name, (_, _, _, named, allowed) in zip(names, SHORTCUTS, strict=True):
        at = broken.index(name)
        report = broken[at:next((s for s in starts if s > at), len(broken))]
        assert named in report, (named, report)
        assert allowed not in report, (allowed, report)


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
