"""Every command that runs without a cluster, through the real CLI, held to the output contract
(docs/reference.md, "Output"): -o json and -o yaml documents (camelCase keys but Kubernetes names, numbers
and booleans as such), tables within 80 columns with the rest in -o wide, no Python reprs, a newline at the end."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import yaml

from gpuctl.util.output import FORMATS, camel, document, table
from tests.conftest import run_gpuctl
from tests.output_contract import faults, parsed, table_faults

SPEC_ARGS = ("cluster", "create", "--gpu", "t4", "--slices", "4", "--karpenter", "--kueue", "--export-spec")
# Each command that needs no cluster, as a user types it (the -o flag added by the test).
COMMANDS = {
    "gpus": ("gpus",),
    "mig validate": ("mig", "validate", "3g.20gb-2x2g.10gb", "--gpu", "a100-40gb"),
    "mig plan": ("mig", "plan", "3g.20gb-2x2g.10gb", "--gpu", "a100-40gb"),
    "cluster list": ("cluster", "list", "--cloud", "sim"),
    "cluster create --export-spec": SPEC_ARGS,
}


@pytest.fixture
def spec(tmp_path: Path, isolated_env: dict[str, str]) -> Path:
    path = tmp_path / "spec.yaml"
    proc = run_gpuctl(*SPEC_ARGS, env=isolated_env)
    assert proc.returncode == 0, proc.stderr
    path.write_text(proc.stdout)
    return path


def test_the_choices_are_listed_once_with_wide() -> None:
    assert FORMATS == ("table", "wide", "json", "yaml")


@pytest.mark.parametrize("fmt", ["json", "yaml"])
@pytest.mark.parametrize("command", sorted(COMMANDS))
@pytest.mark.slow  # gpuctl processes
def test_every_document_keeps_the_contract(command: str, fmt: str, isolated_env: dict[str, str]) -> None:
    proc = run_gpuctl("-o", fmt, *COMMANDS[command], env=isolated_env)
    assert proc.returncode == 0, proc.stderr
    data = parsed(proc.stdout, fmt)
    assert faults(data) == []
    if command == "cluster list":
        assert data == [], proc.stdout  # no clusters in a fresh state dir: an empty list
    else:
        assert data, proc.stdout


@pytest.mark.parametrize("command", sorted(COMMANDS))
@pytest.mark.slow  # gpuctl processes
def test_every_table_fits_80_columns_and_wide_is_taken(command: str, isolated_env: dict[str, str]) -> None:
    for fmt, width in (("table", 80), ("wide", None)):
        proc = run_gpuctl("-o", fmt, *COMMANDS[command], env=isolated_env)
        assert proc.returncode == 0, proc.stderr
        assert table_faults(proc.stdout, width) == [], proc.stdout


def test_gpus_wide_adds_the_columns_the_table_leaves_out(isolated_env: dict[str, str]) -> None:
    narrow = run_gpuctl("gpus", env=isolated_env).stdout.splitlines()[0].split()
    wide = run_gpuctl("gpus", "-o", "wide", env=isolated_env).stdout.splitlines()[0].split()
    assert wide[:len(narrow)] == narrow and {"PRODUCT", "EC2", "OPENSTACK_FLAVOR"} <= set(wide) - set(narrow)


def test_gpus_json_names_each_figure_once_in_camel_case(isolated_env: dict[str, str]) -> None:
    [t4] = [m for m in json.loads(run_gpuctl("gpus", "-o", "json", env=isolated_env).stdout) if m["name"] == "t4"]
    assert t4["memoryMib"] == 15360 and t4["computeCapability"] == [7, 5] and t4["migCapable"] is False
    assert "memory_mib" not in t4


@pytest.mark.slow  # gpuctl processes
def test_render_prints_manifests_as_yaml_or_one_json_list(spec: Path, isolated_env: dict[str, str]) -> None:
    as_yaml = run_gpuctl("render", "-f", str(spec), "-o", "yaml", env=isolated_env)
    as_json = run_gpuctl("render", "-f", str(spec), "-o", "json", env=isolated_env)
    assert as_yaml.returncode == as_json.returncode == 0, as_yaml.stderr + as_json.stderr
    docs = [d for d in yaml.safe_load_all(as_yaml.stdout) if d is not None]
    listed = json.loads(as_json.stdout)
    assert (listed["apiVersion"], listed["kind"]) == ("v1", "List")
    assert listed["items"] == docs and all(d["apiVersion"] and d["kind"] for d in docs)
    assert run_gpuctl("render", "-f", str(spec), env=isolated_env).stdout == as_yaml.stdout


@pytest.mark.slow  # gpuctl processes
def test_export_spec_in_json_is_the_yaml_spec(isolated_env: dict[str, str]) -> None:
    as_yaml = yaml.safe_load(run_gpuctl(*SPEC_ARGS, env=isolated_env).stdout)
    as_json = json.loads(run_gpuctl("-o", "json", *SPEC_ARGS, env=isolated_env).stdout)
    assert as_json == as_yaml and as_json["spec"]["nodeGroups"][0]["gpusPerNode"] == 1


@pytest.mark.slow  # gpuctl processes
def test_render_out_lists_the_files_it_wrote(spec: Path, tmp_path: Path, isolated_env: dict[str, str]) -> None:
    proc = run_gpuctl("render", "-f", str(spec), "--out", str(tmp_path / "r"), "-o", "json", env=isolated_env)
    assert proc.returncode == 0, proc.stderr
    files = json.loads(proc.stdout)["files"]
    assert files and all(Path(f).is_file() for f in files)


def test_an_unknown_format_is_refused_naming_the_choices(isolated_env: dict[str, str]) -> None:
    proc = run_gpuctl("gpus", "-o", "xml", env=isolated_env)
    assert proc.returncode == 2 and proc.stdout == ""
    assert "-o/--output" in proc.stderr and "wide" in proc.stderr, proc.stderr


def test_keys_are_camel_case_at_every_depth_but_kubernetes_names() -> None:
    data = document({"ready_nodes": 1, "gpu_operator": {"operator_namespace": "x"},
                     "allocatable": {"nvidia.com/gpu": 4, "nvidia.com/mig-1g.5gb": 7}, "rows": [{"mig_state": None}],
                     "nodeGroups": [], "gpu-0": {"fb_used_mib": 3}})
    assert data == {"readyNodes": 1, "gpuOperator": {"operatorNamespace": "x"},
                    "allocatable": {"nvidia.com/gpu": 4, "nvidia.com/mig-1g.5gb": 7}, "rows": [{"migState": None}],
                    "nodeGroups": [], "gpu-0": {"fbUsedMib": 3}}
    assert camel("a_b_c") == "aBC" and camel("already") == "already"
    assert faults(data) == [] and faults({"ready_nodes": "2", "ok": "True"}) != []


def test_table_cells_are_written_for_readers() -> None:
    text = table([{"ok": True, "bad": False, "map": {"nvidia.com/gpu": 8}, "none": None, "s": 4.96, "l": ["a", "b"]}],
                 ("ok", "bad", "map", "none", "s", "l"))
    assert text.splitlines()[1].split() == ["yes", "no", "nvidia.com/gpu=8", "-", "5.0", "a,b"]
    assert text.endswith("\n") and table_faults(text) == []


def test_a_free_text_column_is_cut_to_80_columns_in_a_table_only() -> None:
    rows = [{"check": "device-plugin", "ok": True, "detail": "x" * 200}]
    cut = table(rows, ("check", "ok", "detail"), fit="detail")
    assert max(map(len, cut.splitlines())) == 80 and cut.splitlines()[1].endswith("...")
    assert "x" * 200 in table(rows, ("check", "ok", "detail"))
