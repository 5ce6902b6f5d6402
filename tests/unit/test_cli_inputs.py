"""Bad inputs: exit 2, one line naming the field and the fix, no traceback, nothing started."""

from pathlib import Path

import pytest

from tests.conftest import run_gpuctl

BAD_CREATES = [
    (["--gpu", "z100"], "--gpu: unknown GPU 'z100'; use one of: t4,"),
    (["--gpu", "t4", "--nodes", "0"], "--nodes: must be at least 1, got 0"),
    (["--gpu", "t4", "--nodes", "-1"], "'-1' is not a whole number in ASCII digits"),
    (["--gpu", "t4", "--nodes", "abc"], "error: --nodes: 'abc' is not a whole number"),
    (["--gpu", "t4", "--name", "Bad_Name!"], "--name: 'Bad_Name!' is not a valid name; use 1-40 lowercase"),
    (["--gpu", "t4", "--cloud", "gcp"], "--cloud: unknown cloud 'gcp'; use one of: sim"),
    (["--gpu", "t4", "--gpus-per-node", "0"], "--gpus-per-node: must be at least 1"),
    (["--gpu", "t4", "--nodegroup-name", "GPU"], "--nodegroup-name: 'GPU' is not a valid name"),
]


@pytest.mark.parametrize("args,expected", BAD_CREATES, ids=[" ".join(a) for a, _ in BAD_CREATES])
@pytest.mark.slow  # gpuctl processes, one a case
def test_bad_create_input_exits_2_cleanly(args: list[str], expected: str, isolated_env: dict[str, str],
                                          tmp_path: Path) -> None:
    proc = run_gpuctl("cluster", "create", "--cloud", "sim", *args, env=isolated_env) if "--cloud" not in args \
        else run_gpuctl("cluster", "create", *args, env=isolated_env)
    assert proc.returncode == 2, proc.stderr
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1, proc.stderr
    assert lines[0].startswith("error: ") and expected in lines[0]
    assert "Traceback" not in proc.stderr and proc.stdout == ""
    # Nothing started, installed or written.
    assert not (tmp_path / "state").exists()
    assert not (tmp_path / "cache").exists()
    assert not (tmp_path / "kube").exists()


@pytest.mark.parametrize("args,expected", [
    (["-o", "xml", "gpus"], "-o/--output: unknown format 'xml'"),
    (["nodegroup", "add", "--cluster", "demo", "--name", "ng", "--gpu", "t4", "--nodes", "0"], "--nodes: must be at least 1"),
    (["nodegroup", "scale", "--cluster", "demo", "--name", "ng", "--nodes", "abc"], "error: --nodes: 'abc' is not a whole number"),
    (["nodegroup", "add", "--cluster", "Demo!", "--name", "ng", "--gpu", "t4"], "--cluster: 'Demo!' is not a valid name"),
    (["cluster", "delete", "--name", "demo"], "--yes: this deletes resources and needs confirmation; pass --yes"),
    (["cluster", "delete", "--name", "demo", "--yes"], "sim cluster 'demo' not found"),
    (["cluster", "frobnicate"], "error: frobnicate: not a 'gpuctl cluster' command"),
])
@pytest.mark.slow  # gpuctl processes, one a case
def test_other_bad_inputs(args: list[str], expected: str, isolated_env: dict[str, str]) -> None:
    proc = run_gpuctl(*args, env=isolated_env)
    assert proc.returncode == 2
    assert proc.stderr.count("\n") == 1 and expected in proc.stderr, proc.stderr


def test_debug_shows_the_traceback(isolated_env: dict[str, str]) -> None:
    proc = run_gpuctl("--debug", "cluster", "create", "--gpu", "z100", env=isolated_env)
    assert proc.returncode != 0 and "Traceback" in proc.stderr


def test_gpus_json_lists_the_catalog(isolated_env: dict[str, str]) -> None:
    import json

    proc = run_gpuctl("gpus", "-o", "json", env=isolated_env)
    assert proc.returncode == 0, proc.stderr
    gpus = {g["name"]: g for g in json.loads(proc.stdout)}
    assert gpus["a100-40gb"]["migCapable"] is True and gpus["t4"]["mig"] is None
    assert gpus["a100-40gb"]["memoryMib"] == 40960


def test_global_options_are_accepted_anywhere() -> None:
    from gpuctl.cli.main import hoist_global_options

    assert hoist_global_options(["gpus", "-o", "json"]) == ["-o", "json", "gpus"]
    assert hoist_global_options(["cluster", "create", "--gpu", "t4", "--kubeconfig=/k", "-v"]) == \
        ["--kubeconfig=/k", "-v", "cluster", "create", "--gpu", "t4"]
    assert hoist_global_options(["x", "--", "-o", "json"]) == ["x", "--", "-o", "json"]


def test_an_unexpected_error_is_one_line_without_traceback(monkeypatch) -> None:
    import gpuctl.cli.gpus as gpus_cli
    from gpuctl.cli.main import run

    def boom(ctx) -> None:
        raise RuntimeError("disk on fire")

    monkeypatch.setattr(gpus_cli, "emit", lambda *a, **k: boom(None))
    assert run(["gpus"]) == 1
