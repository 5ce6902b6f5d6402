"""The cases of issue 18 (item 2), run as a user runs them: the real `gpuctl` in a subprocess. Each exits 2
with one line naming the flag or field (and the bound, for numbers), before anything is started or written."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from tests.conftest import run_gpuctl

GOOD = Path(__file__).resolve().parents[1] / "specs" / "good.yaml"
HUGE = "9" * 5000  # past Python's 4,300-digit limit for int(str)


@pytest.fixture
def env(isolated_env: dict[str, str], tmp_path: Path) -> dict[str, str]:
    """isolated_env, with a kubeconfig whose server refuses every connection: a check made after the
    first request shows as exit 5, not 2."""
    kube = Path(isolated_env["KUBECONFIG"])
    kube.parent.mkdir()
    kube.write_text("apiVersion: v1\nkind: Config\nclusters: [{name: c, cluster: {server: 'https://127.0.0.1:1'}}]\n"
                    "users: [{name: u, user: {token: x}}]\ncontexts: [{name: c, context: {cluster: c, user: u}}]\n"
                    "current-context: c\n")
    (tmp_path / "regular-file").write_text("x\n")
    return dict(isolated_env, HTTPS_PROXY="http://127.0.0.1:1", https_proxy="http://127.0.0.1:1", NO_PROXY="",
                no_proxy="")


def processes_under(root: Path) -> list[int]:
    """Processes whose command line or environment names a path under `root` (a sim cluster's would)."""
    found = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit() or int(entry.name) == os.getpid():
            continue
        for part in ("cmdline", "environ"):
            try:
                if str(root).encode() in (entry / part).read_bytes():
                    found.append(int(entry.name))
                    break
            except OSError:
                continue
    return found


def refused(proc, expected: str) -> str:
    assert proc.returncode == 2, (proc.returncode, proc.stderr[-2000:])
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("error: "), proc.stderr[-2000:]
    assert expected in lines[0], lines[0][:400]
    assert "Traceback" not in proc.stderr and proc.stdout == ""
    return lines[0]


def nothing_made(env: dict[str, str], tmp_path: Path) -> None:
    for made in ("GPUCTL_STATE_DIR", "GPUCTL_CACHE_DIR"):
        assert not Path(env[made]).exists(), made
    assert processes_under(tmp_path) == []


CREATE = ["cluster", "create", "--cloud", "sim", "--name", "x", "--gpu", "t4", "--nodes", "1"]


def test_a_kubeconfig_under_proc_is_refused_before_the_sim_cluster_starts(env: dict[str, str], tmp_path: Path) -> None:
    line = refused(run_gpuctl("--kubeconfig", "/proc/nonexistent/dir/kc", *CREATE, env=env),
                   "--kubeconfig: cannot write /proc/nonexistent/dir/kc: /proc is on a proc file system")
    assert "pass --kubeconfig with a path you can write" in line
    nothing_made(env, tmp_path)


def test_a_kubeconfig_variable_under_proc_is_refused_naming_it(env: dict[str, str], tmp_path: Path) -> None:
    refused(run_gpuctl(*CREATE, env=dict(env, KUBECONFIG="/proc/nonexistent/kc")),
            "$KUBECONFIG: cannot write /proc/nonexistent/kc")
    nothing_made(env, tmp_path)


def test_a_kubeconfig_with_a_5000_digit_number_is_refused(env: dict[str, str], tmp_path: Path) -> None:
    kubeconfig = tmp_path / "kc"
    kubeconfig.write_text(f"apiVersion: v1\nkind: Config\npreferences: {{colors: {HUGE}}}\n")
    for args in (["status"], CREATE):
        refused(run_gpuctl("--kubeconfig", str(kubeconfig), *args, env=env), "a number of 5000 digits (at most 18)")
    nothing_made(env, tmp_path)


@pytest.mark.parametrize("args,expected", [
    (["--strategy", "bogus", "--nodegroup", "gpu"], "--strategy: unknown strategy 'bogus'"),
    (["--strategy", "", "--nodegroup", "gpu"], "--strategy: unknown strategy ''"),
    (["--selector", "a,,=b!"], "--selector: an empty requirement in 'a,,=b!'"),
    (["--selector", "gpu=a100 b"], "--selector: 'gpu=a100 b' is not a label selector requirement"),
    (["--selector", "Bad_/k=v"], "--selector: invalid key"),
    (["--nodegroup", "gpu", "--timeout", HUGE], "error: --timeout: "),
], ids=["strategy", "empty strategy", "selector", "selector space", "selector key", "timeout"])
@pytest.mark.slow  # gpuctl processes, one a case
def test_mig_apply_judges_its_flags_before_the_cluster(args: list[str], expected: str, env: dict[str, str]) -> None:
    refused(run_gpuctl("mig", "apply", "all-balanced", *args, env=env), expected)


def test_mig_apply_judges_the_layout_before_the_cluster(env: dict[str, str]) -> None:
    refused(run_gpuctl("mig", "apply", "2x9g.99gb", "--nodegroup", "gpu", env=env),
            "LAYOUT: unknown profile '9g.99gb' (no MIG GPU has it)")


@pytest.mark.parametrize("out,expected", [
    ("{file}", "--out: cannot write {file}: it is not a directory"),
    ("{file}/sub", "--out: cannot write {file}/sub: {file} is not a directory"),
    ("/proc/nonexistent/out", "--out: cannot write /proc/nonexistent/out: /proc is on a proc file system"),
    ("", "--out: an empty path"),
], ids=["existing file", "file as parent", "under /proc", "empty"])
@pytest.mark.slow  # gpuctl processes, one a case
def test_render_out_is_judged_before_any_file_is_written(out: str, expected: str, env: dict[str, str],
                                                         tmp_path: Path) -> None:
    file = str(tmp_path / "regular-file")
    before = sorted(tmp_path.rglob("*"))
    cwd = sorted(Path.cwd().iterdir())
    refused(run_gpuctl("render", "-f", str(GOOD), "--out", out.replace("{file}", file), env=env),
            expected.replace("{file}", file))
    assert sorted(tmp_path.rglob("*")) == before and sorted(Path.cwd().iterdir()) == cwd
    assert (tmp_path / "regular-file").read_text() == "x\n"


def test_render_out_with_a_file_where_its_subdirectory_goes(env: dict[str, str], tmp_path: Path) -> None:
    out = tmp_path / "out"
    out.mkdir()
    (out / "helm").write_text("")
    refused(run_gpuctl("render", "-f", str(GOOD), "--out", str(out), env=env), f"{out / 'helm'} is not a directory")
    assert sorted(p.name for p in out.iterdir()) == ["helm"]  # manifests/ not written either


@pytest.mark.parametrize("command", ["apply", "plan", "render"])
@pytest.mark.parametrize("old,new,expected", [
    ("nodes: 2", f"nodes: {HUGE}", "spec.nodeGroups[0].nodes: must be at most 5000, got a number of 5000 digits"),
    ("nodes: 2", f"nodes: -{HUGE}", "spec.nodeGroups[0].nodes: must be at least 1, got a negative number of 5000"),
    ("replicas: 4", f"replicas: {HUGE}", "spec.nodeGroups[0].sharing.timeSlicing.replicas: must be between 2 and 64"),
    ("gpus: 4", f"gpus: {HUGE}", "spec.tenants[0].gpus: must be at most 100000"),
    ("3g.20gb: 2", f"3g.20gb: {HUGE}", "spec.tenants[1].mig: must be at most 100000"),
    ("name: platform", f"name: {HUGE}", "metadata.name: must be a string, got int a number of 5000 digits"),
    ("nfd: standalone", 'nfd: ""', "spec.gpuOperator.nfd: unknown owner ''"),
    ("migStrategy: mixed", 'migStrategy: mixed\n    smokeImage: ""', "spec.gpuOperator.smokeImage: '' is not accepted"),
    ("migStrategy: mixed", 'migStrategy: mixed\n    charts: ""', "spec.gpuOperator.charts: '' is not accepted"),
    ("group: team-a-devs", 'group: team-a-devs\n      cohort: ""', "spec.tenants[0].cohort: '' is not a valid name"),
], ids=["nodes", "negative nodes", "replicas", "tenant gpus", "mig count", "name", "nfd", "smokeImage", "charts",
        "cohort"])
@pytest.mark.slow  # gpuctl processes, one a case
def test_spec_numbers_of_any_length_and_empty_strings(command: str, old: str, new: str, expected: str,
                                                      env: dict[str, str], tmp_path: Path) -> None:
    text = GOOD.read_text()
    assert old in text
    spec = tmp_path / "spec.yaml"
    spec.write_text(text.replace(old, new, 1))
    refused(run_gpuctl(command, "-f", str(spec), env=env), expected)
    nothing_made(env, tmp_path)


@pytest.mark.parametrize("args,expected", [
    (CREATE[:-2] + ["--nodes", HUGE], "--nodes: must be at most 5000, got a number of 5000 digits; pass --nodes 5000"),
    (CREATE + ["--gpus-per-node", HUGE], "--gpus-per-node: must be at most 16"),
    (CREATE + ["--slices", HUGE], "--slices: must be between 2 and 64, got a number of 5000 digits"),
    (CREATE + ["--min-nodes", HUGE], "--min-nodes: must be between 0 and nodes (1)"),
    (CREATE + ["--max-nodes", HUGE], "--max-nodes: must be at most 5000"),
    (CREATE + ["--sharing", ""], "--sharing: unknown strategy ''"),
    (CREATE + ["--nfd", ""], "--nfd: unknown owner ''"),
    (CREATE + ["--charts", ""], "--charts: '' is not accepted"),
    (CREATE + ["--smoke-image", ""], "--smoke-image: '' is not accepted"),
    (["--context", "", *CREATE], "--context: '' is not accepted"),
    (["validate", "--timeout", HUGE], "error: --timeout: '99999"),
    (["apply", "-f", str(GOOD), "--lock-timeout", HUGE], "error: --lock-timeout: '99999"),
    (["tenant", "add", "team-a", "--gpus", HUGE], "--gpus: must be at most 100000, got a number of 5000 digits"),
    (["tenant", "add", "team-a", "--cohort", ""], "--cohort: '' is not a valid name"),
    (["tenant", "add", "team-a", "--mig", f"3g.20gb={HUGE}"], "--mig: must be at most 100000"),
    (["nodegroup", "scale", "--cluster", "x", "--name", "gpu", "--nodes", HUGE], "--nodes: must be at most 5000"),
], ids=["nodes", "gpus-per-node", "slices", "min-nodes", "max-nodes", "sharing", "nfd", "charts", "smoke-image",
        "context", "timeout", "lock-timeout", "tenant gpus", "cohort", "mig", "scale nodes"])
@pytest.mark.slow  # gpuctl processes, one a case
def test_flags_of_any_length_and_empty_values(args: list[str], expected: str, env: dict[str, str],
                                              tmp_path: Path) -> None:
    refused(run_gpuctl(*args, env=env), expected)
    nothing_made(env, tmp_path)
