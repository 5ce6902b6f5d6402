"""ruff and mypy, configured in pyproject.toml, are clean: part of `make test`, as the layer contracts are
(test_architecture.py)."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
BIN = Path(sys.executable).parent


def _run(*argv: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([str(BIN / argv[0]), *argv[1:]], cwd=ROOT, capture_output=True, text=True, timeout=600)


def test_ruff_is_clean() -> None:
    proc = _run("ruff", "check", "--no-cache", "gpuctl", "tests", "bench")
    assert proc.returncode == 0, proc.stdout + proc.stderr


def test_mypy_is_clean() -> None:
    proc = _run("mypy", "--cache-dir", str(ROOT / ".mypy_cache"))  # files: pyproject's [tool.mypy]
    assert proc.returncode == 0, proc.stdout + proc.stderr
