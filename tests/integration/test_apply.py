"""`gpuctl apply -f`: two node groups (time-slicing and MIG) and two tenants on sim."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.conftest import run_gpuctl

SPEC = Path(__file__).resolve().parents[1] / "specs" / "good.yaml"


@pytest.fixture(scope="module")
def applied(sim_env: dict[str, str], tmp_path_factory: pytest.TempPathFactory) -> Iterator[dict[str, str]]:
    env = dict(sim_env, KUBECONFIG=str(tmp_path_factory.mktemp("apply") / "kubeconfig"))
    proc = run_gpuctl("-o", "json", "apply", "-f", str(SPEC), env=env)
    assert proc.returncode == 0, proc.stderr
    env["FIRST_RUN"] = proc.stdout
    yield env
    assert run_gpuctl("cluster", "delete", "--name", "platform", "--yes", env=env).returncode == 0


def test_spec_applies_and_validates(applied: dict[str, str]) -> None:
    result = json.loads(applied["FIRST_RUN"])
    steps = {s["step"]: s["outcome"] for s in result["steps"]}
    assert steps["apply-mig/training"] == "updated"
    assert steps["ensure-tenant/team-a"] == steps["ensure-tenant/team-b"] == "created"
    assert steps["validate/inference"] == steps["validate/training"] == "passed"
    nodes = {n["node"]: n for n in json.loads(run_gpuctl("status", "-o", "json", env=applied).stdout)}
    assert nodes["inference-0"]["allocatable"] == {"nvidia.com/gpu": 4}
    assert nodes["training-0"]["allocatable"] == {"nvidia.com/mig-3g.20gb": 8, "nvidia.com/mig-2g.10gb": 16}
    assert "dedicated=training:NoSchedule" in nodes["training-0"]["taints"]
    tenants = {t["tenant"]: t for t in json.loads(run_gpuctl("tenant", "list", "-o", "json", env=applied).stdout)}
    assert tenants["team-b"]["quota"] == {"nvidia.com/gpu": 2, "nvidia.com/mig-3g.20gb": 2}


REAPPLY = """
import json, os, sys
import kubernetes.client.rest as rest
writes = []
original = rest.RESTClientObject.request
def counting(self, method, url, *args, **kwargs):
    if method not in ("GET", "HEAD", "OPTIONS"):
        writes.append(f"{method} {url}")
    return original(self, method, url, *args, **kwargs)
rest.RESTClientObject.request = counting
from gpuctl.cli.main import run
code = run(["-o", "json", "apply", "-f", sys.argv[1]])
print(json.dumps({"code": code, "writes": writes}), file=sys.stderr)
"""


def test_reapply_sends_no_write(applied: dict[str, str]) -> None:
    import subprocess
    import sys

    proc = subprocess.run([sys.executable, "-c", REAPPLY, str(SPEC)], capture_output=True, text=True, env=applied,
                          timeout=300)
    report = json.loads(proc.stderr.strip().splitlines()[-1])
    assert report["code"] == 0, proc.stderr
    assert report["writes"] == []
    result = json.loads(proc.stdout)
    assert result["changed"] is False
    assert {s["outcome"] for s in result["steps"]} <= {"no change", "passed"}


def test_export_spec_round_trips(tmp_path: Path) -> None:
    proc = run_gpuctl("cluster", "create", "--gpu", "t4", "--nodes", "2", "--slices", "4", "--export-spec")
    assert proc.returncode == 0, proc.stderr
    exported = tmp_path / "exported.yaml"
    exported.write_text(proc.stdout)
    from gpuctl.specfile import export_spec, load_spec, to_platform

    assert export_spec(to_platform(*load_spec(exported))) == proc.stdout


def test_rendered_manifests_apply_cleanly_to_a_fresh_cluster(sim_env: dict[str, str], tmp_path: Path) -> None:
    import subprocess

    from gpuctl.providers.sim.kwok import KwokCluster
    from gpuctl.providers.sim.provider import SimProvider
    from gpuctl.tools.installer import find_tool

    proc = run_gpuctl("render", "-f", str(SPEC), "--out", str(tmp_path / "out"), env=sim_env)
    assert proc.returncode == 0, proc.stderr
    assert sorted(p.name for p in (tmp_path / "out" / "helm").iterdir()) == [
        "values-gpu-operator.yaml", "values-node-feature-discovery.yaml"]
    SimProvider().ensure_cluster("fresh")
    try:
        kubectl = [str(find_tool("kubectl")), "--kubeconfig", str(KwokCluster("fresh").kubeconfig_path)]
        applied = subprocess.run([*kubectl, "apply", "-f", str(tmp_path / "out" / "manifests")],
                                 capture_output=True, text=True, timeout=60)
        assert applied.returncode == 0, applied.stderr
        assert applied.stdout.count("created") == 9
        quota = subprocess.run([*kubectl, "get", "resourcequota", "-n", "team-b", "gpuctl-gpu-quota", "-o",
                                "jsonpath={.spec.hard}"], capture_output=True, text=True, timeout=30).stdout
        assert json.loads(quota) == {"requests.nvidia.com/gpu": "2", "requests.nvidia.com/mig-3g.20gb": "2"}
    finally:
        SimProvider().delete_cluster("fresh")
