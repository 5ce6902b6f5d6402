"""A cluster set up with NVIDIA's GPU Operator v25.10.1 chart upgrades to v26.7.0 by re-running the same
`apply -f`: one Helm release (revision 2), the v26.7.0 CRDs in place, time-slicing and the MIG layout kept.

Both upstream chart trees carry the development version `v1.0.0-devel` (../shared/upstream/README.md);
NVIDIA's release job stamps the real version when it packages the chart, and so does this test with
`helm package --version v25.10.1`, leaving every file of the chart as released."""

from __future__ import annotations

import json
import subprocess
import tarfile
from collections.abc import Iterator
from pathlib import Path

import pytest
import yaml

from tests.conftest import run_gpuctl
from tests.support.tools import find_tool

pytestmark = pytest.mark.integration
UPSTREAM = Path(__file__).resolve().parents[2].parent / "shared" / "upstream"
SPEC = Path(__file__).resolve().parents[1] / "specs" / "good.yaml"
CLUSTER = "platform"


def chart_dir(root: Path, operator: Path) -> Path:
    charts = root / "charts"
    charts.mkdir()
    (charts / "gpu-operator").symlink_to(operator)
    (charts / "node-feature-discovery").symlink_to(UPSTREAM / "nfd-v0.19.0" / "node-feature-discovery")
    return charts


def spec_with_charts(root: Path, charts: Path) -> Path:
    doc = yaml.safe_load(SPEC.read_text())
    doc["spec"]["gpuOperator"]["charts"] = str(charts)
    del doc["spec"]["tenants"]
    path = root / "cluster.yaml"
    path.write_text(yaml.safe_dump(doc))
    return path


@pytest.fixture(scope="module")
def specs(sim_env: dict[str, str], tmp_path_factory: pytest.TempPathFactory) -> Iterator[dict[str, Path | dict]]:
    """Spec files naming a v25.10.1 chart directory (packaged as NVIDIA releases it) and a v26.7.0 one."""
    old, new = tmp_path_factory.mktemp("v25"), tmp_path_factory.mktemp("v26")
    subprocess.run([str(find_tool("helm")), "package", str(UPSTREAM / "gpu-operator-v25.10.1" / "gpu-operator"),
                    "--version", "v25.10.1", "--app-version", "v25.10.1", "-d", str(old)], check=True,
                   capture_output=True)
    with tarfile.open(old / "gpu-operator-v25.10.1.tgz") as archive:
        archive.extractall(old / "packaged", filter="data")
    env = dict(sim_env, KUBECONFIG=str(old / "kubeconfig"))
    yield {"v25": spec_with_charts(old, chart_dir(old, old / "packaged" / "gpu-operator")),
           "v26": spec_with_charts(new, chart_dir(new, UPSTREAM / "gpu-operator-v26.7.0" / "gpu-operator")),
           "env": env}
    assert run_gpuctl("cluster", "delete", "--name", CLUSTER, "--yes", env=env).returncode == 0


def apply(specs: dict, version: str) -> dict[str, str]:
    proc = run_gpuctl("-o", "json", "apply", "-f", str(specs[version]), env=specs["env"])
    assert proc.returncode == 0, proc.stderr
    return {s["step"]: s["outcome"] for s in json.loads(proc.stdout)["steps"]}


def helm_json(env: dict[str, str], *args: str) -> list[dict]:
    out = subprocess.run([str(find_tool("helm")), *args, "-n", "gpu-operator", "-o", "json"], env=env, check=True,
                         capture_output=True, text=True).stdout
    return json.loads(out)


def cluster_policy_schema(env: dict[str, str]) -> dict:
    out = subprocess.run([str(find_tool("kubectl")), "get", "crd", "clusterpolicies.nvidia.com", "-o", "json"],
                         env=env, check=True, capture_output=True, text=True).stdout
    return json.loads(out)["spec"]["versions"][0]["schema"]["openAPIV3Schema"]["properties"]["spec"]["properties"]


def released_schema(version: str) -> dict:
    crd = yaml.safe_load((UPSTREAM / f"gpu-operator-{version}" / "gpu-operator" / "crds" /
                          "nvidia.com_clusterpolicies.yaml").read_text())
    return crd["spec"]["versions"][0]["schema"]["openAPIV3Schema"]["properties"]["spec"]["properties"]


def assert_sharing_and_mig(env: dict[str, str]) -> None:
    nodes = {n["node"]: n for n in json.loads(run_gpuctl("-o", "json", "status", env=env).stdout)["nodes"]}
    assert nodes["inference-0"]["allocatable"] == {"nvidia.com/gpu": 4}
    assert nodes["training-0"]["migState"] == "success"
    assert nodes["training-0"]["allocatable"] == {"nvidia.com/mig-3g.20gb": 8, "nvidia.com/mig-2g.10gb": 16}


def test_v25_cluster_upgrades_in_place_by_rerunning_apply(specs: dict) -> None:
    env = specs["env"]
    apply(specs, "v25")
    assert [r["chart"] for r in helm_json(env, "history", "gpu-operator")] == ["gpu-operator-v25.10.1"]
    assert cluster_policy_schema(env) == released_schema("v25.10.1")
    assert_sharing_and_mig(env)

    steps = apply(specs, "v26")
    assert steps["install-gpu-operator"] == "updated"
    assert steps["apply-mig/training"] == "no change"  # the layout survives the operator upgrade as it is
    releases = [r for r in helm_json(env, "list") if r["name"] == "gpu-operator"]
    assert [(r["revision"], r["status"]) for r in releases] == [("2", "deployed")]
    history = helm_json(env, "history", "gpu-operator")
    assert [(r["chart"], r["status"]) for r in history] == [("gpu-operator-v25.10.1", "superseded"),
                                                            ("gpu-operator-v1.0.0-devel", "deployed")]
    # helm never upgrades crds/: gpuctl applied the v26.7.0 CRDs first, as NVIDIA's upgrade guide says
    assert cluster_policy_schema(env) == released_schema("v26.7.0")
    assert_sharing_and_mig(env)
    assert run_gpuctl("validate", env=env).returncode == 0

    again = apply(specs, "v26")
    assert set(again.values()) <= {"no change", "passed"}, again
    assert helm_json(env, "history", "gpu-operator")[-1]["revision"] == 2
