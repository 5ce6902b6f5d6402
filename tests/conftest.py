"""Shared helpers: run the real `gpuctl` command in a subprocess, as a user would."""

from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import Generator, Iterator
from pathlib import Path

import pytest


def run_gpuctl(*args: str, env: dict[str, str] | None = None, timeout: float = 600) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "gpuctl", *args], capture_output=True, text=True,
                          env=env, timeout=timeout)


@pytest.fixture
def isolated_env(tmp_path: Path) -> dict[str, str]:
    """An environment whose gpuctl state, tool cache and kubeconfig are all empty temp dirs."""
    return dict(
        os.environ,
        GPUCTL_STATE_DIR=str(tmp_path / "state"),
        GPUCTL_CACHE_DIR=str(tmp_path / "cache"),
        KUBECONFIG=str(tmp_path / "kube" / "config"),
        PATH="/usr/bin:/bin",  # no Go, no tools: nothing could be installed or started
    )


# --- no test or fixture leaves os.environ changed for the tests collected after it ----------------------
# (A session-scoped fixture once set GPUCTL_STATE_DIR and KUBECONFIG until the session's end: every unit
# test collected after tests/integration ran against the sim's state dir.) Two checks, both on the whole
# environment (but pytest's own PYTEST_CURRENT_TEST):
# - each test: once its function-scoped fixtures are torn down, os.environ is what it was before they were
#   set up (module- and session-scoped fixtures are set up before that window and torn down after it);
# - each module: once its last test and its module-scoped fixtures are torn down, os.environ is what it was
#   when the session's first test started. A module-scoped fixture must restore what it sets by the
#   module's end, and a session-scoped fixture must set nothing (it would outlive its module).
# A difference is an error in the teardown of the test that ends the window; os.environ is put back then,
# so that the tests after it run as they would alone. Only names are shown: values may be credentials.

_NOT_WATCHED = frozenset({"PYTEST_CURRENT_TEST"})
_session_environ: dict[str, str] | None = None


def _environ() -> dict[str, str]:
    return {key: value for key, value in os.environ.items() if key not in _NOT_WATCHED}


def restore_environ(before: dict[str, str]) -> list[str]:
    """Put os.environ back as `before` (but the unwatched names); what differed: KEY (set|unset|changed) each."""
    now = _environ()
    changes = []
    for key in sorted(before.keys() | now.keys()):
        if before.get(key) == now.get(key):
            continue
        changes.append(f"{key} ({'set' if key not in before else 'unset' if key not in now else 'changed'})")
        if key in before:
            os.environ[key] = before[key]
        else:
            del os.environ[key]
    return changes


@pytest.fixture(autouse=True)
def _environ_kept_by_each_test(request: pytest.FixtureRequest) -> Iterator[None]:
    before = _environ()
    yield
    if changes := restore_environ(before):
        pytest.fail(f"{request.node.nodeid} left os.environ changed (the test or a function-scoped fixture; "
                    f"use monkeypatch.setenv or an env dict for subprocesses): {', '.join(changes)}", pytrace=False)


@pytest.hookimpl(wrapper=True)
def pytest_runtest_setup(item: pytest.Item) -> Generator[None, None, None]:
    global _session_environ
    if _session_environ is None:
        _session_environ = _environ()
    return (yield)


@pytest.hookimpl(wrapper=True)
def pytest_runtest_teardown(item: pytest.Item, nextitem: pytest.Item | None) -> Generator[None, None, None]:
    module = item.getparent(pytest.Module)
    last_of_module = nextitem is None or nextitem.getparent(pytest.Module) is not module
    baseline = _session_environ if last_of_module else None
    try:
        result = yield
    except BaseException:
        if baseline is not None:
            restore_environ(baseline)  # the teardown's own error is what gets reported
        raise
    if baseline is not None and (changes := restore_environ(baseline)):
        raise pytest.fail.Exception(
            f"os.environ differs after {module.nodeid if module else item.nodeid} and its module-scoped fixtures "
            f"were torn down (set by a session-scoped fixture, or not restored by a module-scoped one): "
            f"{', '.join(changes)}", pytrace=False)
    return result


# --- a skip is a failure of the run unless it is named here with its reason --------------------------------
# (With a warm tool cache and no Go on PATH, 15 tests once skipped with an "s" nobody read.) Keys are node ids.
EXPECTED_SKIPS: dict[str, str] = {}
_unexpected_skips: list[str] = []


def pytest_runtest_logreport(report: pytest.TestReport) -> None:
    if report.skipped and report.nodeid not in EXPECTED_SKIPS:
        reason = report.longrepr[2] if isinstance(report.longrepr, tuple) else str(report.longrepr)
        _unexpected_skips.append(f"{report.nodeid}: {reason}")


def pytest_sessionfinish(session: pytest.Session, exitstatus: int) -> None:
    if _unexpected_skips and exitstatus == pytest.ExitCode.OK:
        session.exitstatus = pytest.ExitCode.TESTS_FAILED


def pytest_terminal_summary(terminalreporter: pytest.TerminalReporter) -> None:
    if _unexpected_skips:
        terminalreporter.section("unexpected skips (a failure: fix the cause, or name it in EXPECTED_SKIPS)")
        for line in _unexpected_skips:
            terminalreporter.line(line)



# --- parallel workers: `make test` runs pytest-xdist with this file's scheduler ------------------------------
# Each module runs on one worker, so its module-scoped cluster is built once; the modules that share a family's
# session-scoped cluster (tests/integration/conftest.py) run on one worker too, so that cluster is built once per
# run, not once per worker. (xdist's own --dist loadgroup marks node ids in a way pytest 9.2 no longer sees.)
# Modules are handed out in collection order (integration before unit: the long ones first, the short fill in).
FAMILY_OF: dict[str, str] = {
    **dict.fromkeys(("tests/integration/test_apply.py", "tests/integration/test_readme_spec.py",
                     "tests/integration/test_plan_matches_apply.py"), "platform"),  # the last by getfixturevalue
    **dict.fromkeys((f"tests/integration/test_{m}.py" for m in (
        "kube_door", "sim_cluster", "tenant_fence", "tenant_queues", "tenant_updates", "tenants",
        "upstream_crds")), "sim_cluster"),
    **dict.fromkeys(("tests/integration/test_openstack_bed.py", "tests/integration/test_openstack_magnum.py"),
                    "openstack_bed"),
}


def _module(nodeid: str) -> str:
    return nodeid.split("::", 1)[0]


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    """A module that uses a family's cluster is listed with that family in FAMILY_OF (else a worker of its own
    would build that cluster again)."""
    for item in items:
        for family in ("platform", "sim_cluster", "openstack_bed"):
            if family in getattr(item, "fixturenames", ()) and FAMILY_OF.get(_module(item.nodeid)) != family:
                raise pytest.UsageError(f"{_module(item.nodeid)} uses the {family!r} cluster: list it under "
                                        f"{family!r} in tests/conftest.py FAMILY_OF")


def pytest_xdist_make_scheduler(config: pytest.Config, log: object) -> object:
    from xdist.scheduler import LoadScopeScheduling

    class FamilyScheduling(LoadScopeScheduling):
        def _split_scope(self, nodeid: str) -> str:
            return FAMILY_OF.get(_module(nodeid), _module(nodeid))

    config.option.loadscopereorder = False  # collection order, not the most tests first
    return FamilyScheduling(config, log)
