"""Values from a fixed set (GPU models, clouds, sharing strategies, NFD owners, MIG strategies, output formats) read
the same in every command and in a spec: in any case, turned into the one spelling gpuctl writes
(gpuctl.util.choices); a near miss or another name of a value is refused with the value meant."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml

from tests.conftest import run_gpuctl


def _create(*args: str) -> list[str]:
    return ["cluster", "create", *args, "--export-spec"]


def test_create_reads_every_value_in_any_case_as_its_one_spelling(isolated_env: dict[str, str]) -> None:
    lower = run_gpuctl(*_create("--cloud", "sim", "--gpu", "t4", "--sharing", "time-slicing", "--slices", "2",
                                "--nfd", "operator", "--mig-strategy", "single"), env=isolated_env, timeout=60)
    mixed = run_gpuctl(*_create("--cloud", "SIM", "--gpu", "T4", "--sharing", "Time-Slicing", "--slices", "2",
                                "--nfd", "Operator", "--mig-strategy", "SINGLE"), env=isolated_env, timeout=60)
    assert lower.returncode == 0 and mixed.returncode == 0, lower.stderr + mixed.stderr
    assert mixed.stdout == lower.stdout
    spec = yaml.safe_load(mixed.stdout)["spec"]
    assert spec["provider"]["cloud"] == "sim" and spec["nodeGroups"][0]["gpu"] == "t4"
    assert (spec["gpuOperator"]["nfd"], spec["gpuOperator"]["migStrategy"]) == ("operator", "single")


@pytest.mark.slow  # gpuctl processes
def test_the_gpu_mig_validate_takes_is_the_one_create_takes(isolated_env: dict[str, str]) -> None:
    """The issue's case: `mig validate --gpu A100-40GB` was accepted and `cluster create --gpu A100-40GB` refused."""
    validated = run_gpuctl("-o", "json", "mig", "validate", "3g.20gb", "--gpu", "A100-40GB", env=isolated_env,
                           timeout=60)
    created = run_gpuctl(*_create("--gpu", "A100-40GB"), env=isolated_env, timeout=60)
    assert validated.returncode == 0 and created.returncode == 0, validated.stderr + created.stderr
    assert '"gpu": "a100-40gb"' in validated.stdout and "gpu: a100-40gb" in created.stdout
    refused = [run_gpuctl("mig", "validate", "3g.20gb", "--gpu", " a100-40gb", env=isolated_env, timeout=60),
               run_gpuctl(*_create("--gpu", " a100-40gb"), env=isolated_env, timeout=60)]
    assert [p.returncode for p in refused] == [2, 2]  # blanks are no case: refused by both alike
    assert refused[0].stderr == refused[1].stderr


def _spec(tmp_path: Path, name: str, cloud: str, gpu: str, nfd: str = "standalone") -> Path:
    path = tmp_path / name
    path.write_text(yaml.safe_dump({
        "apiVersion": "gpuctl.dev/v1alpha1", "kind": "GpuCluster", "metadata": {"name": "demo"},
        "spec": {"provider": {"cloud": cloud}, "nodeGroups": [{"name": "gpu", "gpu": gpu, "nodes": 1}],
                 "gpuOperator": {"nfd": nfd}}}))
    return path


@pytest.mark.slow  # gpuctl processes
def test_a_spec_reads_its_values_in_any_case_as_the_command_line_does(tmp_path: Path,
                                                                      isolated_env: dict[str, str]) -> None:
    lower = run_gpuctl("render", "-f", str(_spec(tmp_path, "lower.yaml", "sim", "t4")), env=isolated_env, timeout=60)
    mixed = run_gpuctl("render", "-f", str(_spec(tmp_path, "mixed.yaml", "Sim", "T4", "Standalone")),
                       env=isolated_env, timeout=60)
    assert lower.returncode == 0 and mixed.returncode == 0, lower.stderr + mixed.stderr
    assert mixed.stdout == lower.stdout and '{"gpu": "t4", ' in lower.stdout  # the group record


NEAR_MISSES = [
    (["mig", "validate", "3g.20gb", "--gpu", "a10O"],
     "--gpu: unknown GPU 'a10O'; did you mean 'a10g'? (gpuctl gpus lists them)"),
    (_create("--gpu", "a100"),
     "--gpu: unknown GPU 'a100'; did you mean 'a100-40gb' or 'a100-80gb'? (gpuctl gpus lists them)"),
    (["nodegroup", "add", "--cluster", "demo", "--name", "ng", "--gpu", "Tesla-T4"],
     "--gpu: unknown GPU 'Tesla-T4'; did you mean 't4'? (gpuctl gpus lists them)"),
    (_create("--gpu", "t4", "--sharing", "timeslicing", "--slices", "2"),
     "--sharing: unknown strategy 'timeslicing'; did you mean 'time-slicing'? (one of: none, time-slicing, mps)"),
    (_create("--gpu", "t4", "--cloud", "aws"),
     "--cloud: unknown cloud 'aws'; did you mean 'eks'? (one of: sim, openstack, eks)"),
    (["cluster", "list", "--cloud", "opnstack"],
     "--cloud: unknown cloud 'opnstack'; did you mean 'openstack'? (one of: sim, openstack, eks)"),
    (_create("--gpu", "t4", "--nfd", "operater"),
     "--nfd: unknown owner 'operater'; did you mean 'operator'? (one of: standalone, operator)"),
    (_create("--gpu", "t4", "--mig-strategy", "mix"),
     "--mig-strategy: unknown strategy 'mix'; did you mean 'mixed'? (one of: mixed, single)"),
    (["mig", "apply", "all-balanced", "--strategy", "singel"],
     "--strategy: unknown strategy 'singel'; did you mean 'single'? (one of: mixed, single)"),
    (["-o", "jsn", "gpus"], "-o/--output: unknown format 'jsn'; did you mean 'json'? (one of: table, wide, json, yaml)"),
    (_create("--gpu", "z100"), "--gpu: unknown GPU 'z100'; use one of: t4, a10g, l4"),  # nothing near: the list
]


@pytest.mark.parametrize("args,line", NEAR_MISSES, ids=[" ".join(a) for a, _ in NEAR_MISSES])
@pytest.mark.slow  # gpuctl processes, one a case
def test_a_near_miss_is_refused_naming_the_value_meant(args: list[str], line: str,
                                                       isolated_env: dict[str, str]) -> None:
    proc = run_gpuctl(*args, env=isolated_env, timeout=60)
    assert proc.returncode == 2, proc.stderr
    [got] = proc.stderr.splitlines()
    assert got.startswith(f"error: {line}"), got
    assert proc.stdout == ""


@pytest.mark.parametrize("cloud,gpu,line", [
    ("sim", "Tesla-T4", "spec.nodeGroups[0].gpu: unknown GPU 'Tesla-T4'; did you mean 't4'?"),
    ("aws", "t4", "spec.provider.cloud: unknown cloud 'aws'; did you mean 'eks'?"),
])
def test_a_spec_near_miss_names_its_field_and_the_value_meant(cloud: str, gpu: str, line: str, tmp_path: Path,
                                                              isolated_env: dict[str, str]) -> None:
    proc = run_gpuctl("render", "-f", str(_spec(tmp_path, "spec.yaml", cloud, gpu)), env=isolated_env, timeout=60)
    assert proc.returncode == 2 and proc.stderr.startswith(f"error: {line}"), proc.stderr
