"""The test suite's own rules: every module under tests/integration carries the `integration` marker (so
`-m "not integration"` leaves out every test that needs the sim cluster), and no test or fixture leaves
os.environ changed for the tests collected after it (tests/conftest.py checks it in every run)."""

from __future__ import annotations

import ast
import shutil
import subprocess
import sys
import textwrap
from pathlib import Path

TESTS = Path(__file__).resolve().parents[1]


def _marks(module: Path) -> list[str]:
    """The marks in the module-level `pytestmark = ...` (one mark or a list/tuple of them), as source text."""
    for node in ast.parse(module.read_text(), filename=str(module)).body:
        if isinstance(node, (ast.Assign, ast.AnnAssign)):
            targets = node.targets if isinstance(node, ast.Assign) else [node.target]
            if any(isinstance(t, ast.Name) and t.id == "pytestmark" for t in targets) and node.value is not None:
                values = node.value.elts if isinstance(node.value, (ast.List, ast.Tuple)) else [node.value]
                return [ast.unparse(v) for v in values]
    return []


def test_every_integration_module_is_marked_integration() -> None:
    modules = sorted((TESTS / "integration").glob("test_*.py"))
    assert len(modules) >= 26
    unmarked = [m.name for m in modules if "pytest.mark.integration" not in _marks(m)]
    assert unmarked == [], f"add `pytestmark = pytest.mark.integration` to {unmarked}"


def test_marks_are_read_from_the_module_level_assignment(tmp_path: Path) -> None:
    cases = {"pytestmark = pytest.mark.integration\n": True,
             "pytestmark = [pytest.mark.integration, pytest.mark.slow]\n": True,
             "pytestmark: list = [pytest.mark.slow]\n": False,
             "def f():\n    pytestmark = pytest.mark.integration\n": False,
             "# pytestmark = pytest.mark.integration\n": False}
    for source, marked in cases.items():
        (tmp_path / "test_x.py").write_text(source)
        assert ("pytest.mark.integration" in _marks(tmp_path / "test_x.py")) is marked, source


# --- the environment guard of tests/conftest.py, run on a suite made to break it --------------------------

LEAKY = {
    "test_a_session_fixture.py": """
        import os
        import pytest

        @pytest.fixture(scope="session")
        def state_dir():
            os.environ["GPUCTL_STATE_DIR"] = "/tmp/leak"   # until the session's end: every later test sees it
            yield
            os.environ.pop("GPUCTL_STATE_DIR", None)

        def test_one(state_dir): pass
        def test_two(state_dir): pass
    """,
    "test_b_a_test.py": """
        import os

        def test_sets(): os.environ["KUBECONFIG"] = "/tmp/leak"
        def test_after(): assert "KUBECONFIG" not in os.environ   # put back by the guard
    """,
    "test_c_kept.py": """
        import os
        import pytest

        @pytest.fixture(scope="module")
        def module_env():
            with pytest.MonkeyPatch.context() as patch:
                patch.setenv("GPUCTL_STATE_DIR", "/tmp/module")
                yield

        def test_module_env(module_env): assert os.environ["GPUCTL_STATE_DIR"] == "/tmp/module"
        def test_monkeypatch(module_env, monkeypatch): monkeypatch.setenv("KUBECONFIG", "/tmp/x")
        def test_restored_by_hand():
            os.environ["GPUCTL_X"] = "1"
            del os.environ["GPUCTL_X"]
    """,
    "test_d_after.py": """
        import os

        def test_clean(): assert "GPUCTL_STATE_DIR" not in os.environ and "KUBECONFIG" not in os.environ
    """,
}


def test_the_guard_reports_each_leak_once_and_restores_the_environment(tmp_path: Path) -> None:
    shutil.copy(TESTS / "conftest.py", tmp_path / "conftest.py")
    for name, source in LEAKY.items():
        (tmp_path / name).write_text(textwrap.dedent(source))
    env = {"PATH": "/usr/bin:/bin", "HOME": str(tmp_path)}  # neither GPUCTL_STATE_DIR nor KUBECONFIG
    proc = subprocess.run([sys.executable, "-m", "pytest", "-p", "no:cacheprovider", "-rA", "-vv", str(tmp_path)],
                          capture_output=True, text=True, cwd=tmp_path, env=env, timeout=120)
    out = proc.stdout
    assert proc.returncode == 1, out + proc.stderr
    errors = [line for line in out.splitlines() if line.startswith("ERROR ")]
    assert len(errors) == 2, out
    assert "test_a_session_fixture.py::test_two" in errors[0] and "GPUCTL_STATE_DIR (set)" in errors[0], out
    assert "set by a session-scoped fixture" in errors[0]
    assert "test_b_a_test.py::test_sets" in errors[1] and "KUBECONFIG (set)" in errors[1], out
    assert "/tmp/leak" not in out  # names only: a value may be a credential
    assert "8 passed, 2 errors" in out, out

