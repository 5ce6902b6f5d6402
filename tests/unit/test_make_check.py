"""`make check`, the edit loop, runs the lint, the types, the layer contracts and the unit tests that need no
cluster, download or build; `make test` stays the whole suite (docs/testing.md)."""

from __future__ import annotations

import re
from pathlib import Path

import tomllib

ROOT = Path(__file__).resolve().parents[2]


def recipe(target: str) -> list[str]:
    """The command lines of a Makefile target."""
    text = (ROOT / "Makefile").read_text()
    found = re.search(rf"^{target}:.*\n((?:\t.*\n)+)", text, re.M)
    assert found, f"no {target} target in the Makefile"
    return [line.strip() for line in found[1].splitlines()]


def test_check_runs_ruff_mypy_the_contracts_and_the_unit_tests_without_clusters_or_downloads() -> None:
    lines = recipe("check")
    assert "$(BIN)/ruff check gpuctl tests bench" in lines
    assert "$(BIN)/mypy" in lines  # files: pyproject's [tool.mypy]
    assert "$(BIN)/lint-imports" in lines
    [pytest] = [line for line in lines if line.startswith("$(BIN)/pytest")]
    assert '-m "not integration and not conformance and not slow"' in pytest and pytest.endswith(" tests/unit")


def test_the_markers_check_deselects_are_registered_and_test_runs_everything() -> None:
    config = tomllib.loads((ROOT / "pyproject.toml").read_text())
    markers = {m.split(":")[0] for m in config["tool"]["pytest"]["ini_options"]["markers"]}
    assert {"integration", "conformance", "slow"} <= markers
    # everything, on parallel workers that keep each module and each cluster family together (tests/conftest.py)
    assert recipe("test") == ["$(BIN)/pytest -q -n $(JOBS)"]
    assert set(config["tool"]["mypy"]["files"]) >= {"gpuctl", "bench", "tests"}  # make check and make test: all three
