"""The output contract (docs/reference.md, "Output") on one sim cluster, through the real CLI: cluster create's
summary, apply, status, tenant add and list, nodegroup list, validate and doctor, in json, yaml, table and wide."""

from __future__ import annotations

import json
import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.conftest import run_gpuctl
from tests.integration.conftest import SimCluster
from tests.output_contract import faults, parsed, table_faults

pytestmark = pytest.mark.integration

NAME = "contract"


def gpuctl(cluster: SimCluster, *args: str) -> subprocess.CompletedProcess[str]:
    proc = run_gpuctl("--kubeconfig", str(cluster.kubeconfig), *args, env=cluster.env)
    assert proc.returncode == 0, proc.stderr
    return proc


@pytest.fixture(scope="module")
def created(sim_env: dict[str, str], tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[SimCluster, dict]]:
    """A cluster of one T4 node whose GPU is shared 4 ways, and what `cluster create -o json` said."""
    kubeconfig = tmp_path_factory.mktemp(NAME) / "kubeconfig"
    cluster = SimCluster(NAME, kubeconfig, dict(sim_env, KUBECONFIG=str(kubeconfig)))
    proc = run_gpuctl("--kubeconfig", str(kubeconfig), "-o", "json", "cluster", "create", "--name", NAME,
                      "--gpu", "t4", "--slices", "4", env=cluster.env)
    assert proc.returncode == 0, proc.stderr
    try:
        yield cluster, parsed(proc.stdout, "json")
    finally:
        proc = run_gpuctl("-o", "json", "cluster", "delete", "--name", NAME, "--yes", env=cluster.env)
        assert proc.returncode == 0, proc.stderr
        assert faults(parsed(proc.stdout, "json")) == [], proc.stdout


@pytest.fixture(scope="module")
def cluster(created: tuple[SimCluster, dict]) -> SimCluster:
    return created[0]


def test_create_summary_counts_physical_gpus_and_their_slices(created: tuple[SimCluster, dict]) -> None:
    cluster, result = created
    assert faults(result) == []
    [group] = result["nodeGroups"]
    assert (group["gpusPerNode"], group["sharing"], group["slices"]) == (1, "time-slicing", 4)
    assert group["allocatable"] == {"nvidia.com/gpu": 4} and group["readyNodes"] == 1
    checks = [(c["check"], c["detail"]) for c in result["checks"]]
    assert len(checks) == len(set(checks)) and "capacity" in dict(checks), checks  # each check once
    assert all(isinstance(s["seconds"], (int, float)) and round(s["seconds"], 1) == s["seconds"]
               for s in result["steps"])
    again = gpuctl(cluster, "cluster", "create", "--name", NAME, "--gpu", "t4", "--slices", "4")
    header, row = again.stdout.splitlines()[:2]
    columns = dict(zip(header.split(), row.split(), strict=True))
    assert (columns["GPUS_PER_NODE"], columns["SLICES"]) == ("1", "4"), again.stdout
    assert table_faults(again.stdout) == []
    assert "ensure-cluster" not in again.stdout and "ensure-cluster" in again.stderr  # the steps once, on stderr


@pytest.mark.parametrize("fmt", ["json", "yaml"])
def test_status_holds_the_operator_once_at_the_top(cluster: SimCluster, fmt: str) -> None:
    data = parsed(gpuctl(cluster, "-o", fmt, "status").stdout, fmt)
    assert faults(data) == []
    assert data["gpuOperator"]["release"] == "gpu-operator" and data["gpuOperator"]["configuredByGpuctl"] is True
    [node] = data["nodes"]
    assert "gpuOperator" not in node and (node["gpu"], node["gpus"], node["replicas"]) == ("t4", 1, 4)
    assert node["allocatable"] == {"nvidia.com/gpu": 4} and node["devicePlugin"] == "ready"


def test_status_table_fits_and_ends_before_the_operator_section(cluster: SimCluster) -> None:
    text = gpuctl(cluster, "status").stdout
    assert table_faults(text) == []
    table, operator = text.split("\n\n")
    assert table.splitlines()[1].split()[1:4] == ["gpu", "t4", "1"]
    assert operator.startswith("GPU Operator: release gpu-operator")
    wide = gpuctl(cluster, "-o", "wide", "status").stdout
    assert {"PRODUCT", "DEVICE_PLUGIN", "TAINTS"} <= set(wide.splitlines()[0].split())
    assert table_faults(wide, None) == []


def test_tenant_add_and_list_name_the_quota_alike_as_numbers(cluster: SimCluster) -> None:
    added = gpuctl(cluster, "-o", "json", "tenant", "add", "team-a", "--gpus", "2")
    out = parsed(added.stdout, "json")
    assert faults(out) == [] and out["quota"] == {"nvidia.com/gpu": 2}
    assert "fence in force" not in added.stderr and "Kueue is not installed" not in added.stderr, added.stderr
    listed = parsed(gpuctl(cluster, "-o", "yaml", "tenant", "list").stdout, "yaml")
    assert faults(listed) == []
    [row] = [r for r in listed if r["tenant"] == "team-a"]
    assert (row["quota"], row["used"]) == ({"nvidia.com/gpu": 2}, {"nvidia.com/gpu": 0})
    assert table_faults(gpuctl(cluster, "tenant", "list").stdout) == []
    verbose = gpuctl(cluster, "-v", "tenant", "add", "team-b", "--gpus", "1")
    assert "GPU fence in force" in verbose.stderr, verbose.stderr  # -v: how the promise was kept


def test_nodegroup_list_and_validate_keep_the_contract(cluster: SimCluster) -> None:
    groups = parsed(gpuctl(cluster, "-o", "json", "nodegroup", "list", "--cluster", NAME).stdout, "json")
    assert faults(groups) == [] and groups[0]["readyNodes"] == 1 and groups[0]["gpusPerNode"] == 1
    assert table_faults(gpuctl(cluster, "nodegroup", "list", "--cluster", NAME).stdout) == []
    checks = parsed(gpuctl(cluster, "-o", "json", "validate").stdout, "json")
    assert faults(checks) == [] and all(c["ok"] is True for c in checks)
    capacity = next(c["detail"] for c in checks if c["check"] == "capacity")
    assert capacity.endswith("what was configured: nvidia.com/gpu=4"), capacity
    text = gpuctl(cluster, "validate").stdout
    assert table_faults(text) == [] and " yes " in text


@pytest.mark.parametrize("fmt", ["json", "yaml"])
def test_doctor_on_a_healthy_cluster_is_an_empty_list(cluster: SimCluster, fmt: str) -> None:
    """(Findings in the contract's form, with every field: tests/integration/test_doctor.py.)"""
    data = parsed(gpuctl(cluster, "-o", fmt, "doctor").stdout, fmt)
    assert data == [] and faults(data) == []


def test_apply_prints_its_steps_once_and_a_summary(cluster: SimCluster, tmp_path: Path) -> None:
    spec = tmp_path / "spec.yaml"
    spec.write_text(gpuctl(cluster, "cluster", "create", "--name", NAME, "--gpu", "t4", "--slices", "4",
                           "--export-spec").stdout + "  tenants:\n    - {name: team-a, gpus: 2}\n")
    proc = gpuctl(cluster, "apply", "-f", str(spec))
    assert "ensure-tenant/team-a" in proc.stderr and "ensure-tenant/team-a" not in proc.stdout
    assert table_faults(proc.stdout) == [] and proc.stdout.splitlines()[0].split()[:2] == ["NAME", "GPU"]
    assert "fence in force" not in proc.stderr and "Kueue is not installed" not in proc.stderr, proc.stderr
    result = json.loads(gpuctl(cluster, "-o", "json", "apply", "-f", str(spec)).stdout)
    assert faults(result) == [] and result["changed"] is False
    assert [s["step"] for s in result["steps"]].count("ensure-tenant/team-a") == 1


def test_plan_scale_add_delete_list_remove_and_install_keep_the_contract(cluster: SimCluster, tmp_path: Path) -> None:
    spec = tmp_path / "spec.yaml"
    spec.write_text(gpuctl(cluster, "cluster", "create", "--name", NAME, "--gpu", "t4", "--slices", "4",
                           "--export-spec").stdout)
    documents = {
        "plan": gpuctl(cluster, "-o", "json", "plan", "-f", str(spec)).stdout,
        "nodegroup scale": gpuctl(cluster, "-o", "json", "nodegroup", "scale", "--cluster", NAME, "--name", "gpu",
                                  "--nodes", "1").stdout,
        "cluster list": gpuctl(cluster, "-o", "json", "cluster", "list").stdout,
        "tenant remove": gpuctl(cluster, "-o", "json", "tenant", "remove", "team-b", "--yes").stdout,
        "sim install": gpuctl(cluster, "-o", "json", "sim", "install").stdout,
        "nodegroup add": gpuctl(cluster, "-o", "json", "nodegroup", "add", "--cluster", NAME, "--name", "extra",
                                "--gpu", "t4", "--nodes", "1").stdout,
        "nodegroup delete": gpuctl(cluster, "-o", "json", "nodegroup", "delete", "--cluster", NAME, "--name", "extra",
                                   "--yes").stdout,
    }
    for command, text in documents.items():
        data = parsed(text, "json")
        assert data and faults(data) == [], (command, faults(data), text)
    assert parsed(documents["tenant remove"], "json")["change"] == "deleted"
    assert any(c["name"] == NAME for c in parsed(documents["cluster list"], "json"))
