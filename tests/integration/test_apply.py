"""`gpuctl apply -f`: two node groups (time-slicing and MIG) and two tenants on sim: the session's `platform`
cluster (the README's spec, the same document as tests/specs/good.yaml, applied there first). A test that changes it
applies good.yaml again before it returns."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.conftest import run_gpuctl
from tests.integration.conftest import PLATFORM_SPEC, Platform
from tests.support.ops import granted

pytestmark = pytest.mark.integration

SPEC = Path(__file__).resolve().parents[1] / "specs" / "good.yaml"


@pytest.fixture(scope="module")
def applied(platform: Platform) -> dict[str, str]:
    from gpuctl.api import load_spec, to_platform

    # good.yaml (block style, edited below by line) is the README's spec (flow style): one document
    assert to_platform(*load_spec(SPEC)) == to_platform(*load_spec(PLATFORM_SPEC))
    return dict(platform.env, FIRST_RUN=json.dumps(platform.first_run))


def test_spec_applies_and_validates(applied: dict[str, str]) -> None:
    result = json.loads(applied["FIRST_RUN"])
    steps = {s["step"]: s["outcome"] for s in result["steps"]}
    assert steps["apply-mig/training"] == "updated"
    assert steps["ensure-tenant/team-a"] == steps["ensure-tenant/team-b"] == "created"
    assert steps["validate/inference"] == steps["validate/training"] == "passed"
    nodes = {n["node"]: n for n in json.loads(run_gpuctl("status", "-o", "json", env=applied).stdout)["nodes"]}
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
    assert {s["outcome"] for s in result["steps"]} == {"no change"}


def test_export_spec_round_trips(tmp_path: Path) -> None:
    proc = run_gpuctl("cluster", "create", "--gpu", "t4", "--nodes", "2", "--slices", "4", "--export-spec")
    assert proc.returncode == 0, proc.stderr
    exported = tmp_path / "exported.yaml"
    exported.write_text(proc.stdout)
    from gpuctl.api import export_spec, load_spec, to_platform

    assert export_spec(to_platform(*load_spec(exported))) == proc.stdout


def test_rendered_manifests_apply_cleanly_to_a_fresh_cluster(sim_env: dict[str, str], tmp_path: Path) -> None:
    """A bare cluster of its own (no GPU stack, no tenants): the render must create every object on a cluster that
    has none of them (14 created), which the shared `platform` cannot show."""
    import subprocess

    from tests.support.sim import KwokCluster, SimProvider
    from tests.support.tools import find_tool

    proc = run_gpuctl("render", "-f", str(SPEC), "--out", str(tmp_path / "out"), env=sim_env)
    assert proc.returncode == 0, proc.stderr
    assert sorted(p.name for p in (tmp_path / "out" / "helm").iterdir()) == [
        "gpu-operator.values.yaml", "node-feature-discovery.values.yaml"]
    SimProvider().ensure_cluster("fresh")
    try:
        kubectl = [str(find_tool("kubectl")), "--kubeconfig", str(KwokCluster("fresh").kubeconfig_path)]
        applied = subprocess.run([*kubectl, "apply", "-f", str(tmp_path / "out" / "manifests")],
                                 capture_output=True, text=True, timeout=60)
        assert applied.returncode == 0, applied.stderr
        # with gpuctl-node-groups (the record of each node group), the fence's and the GPU tolerations' policies
        # and bindings
        assert applied.stdout.count("created") == 14
        quota = subprocess.run([*kubectl, "get", "resourcequota", "-n", "team-b", "gpuctl-gpu-quota", "-o",
                                "jsonpath={.spec.hard}"], capture_output=True, text=True, timeout=30).stdout
        assert granted(json.loads(quota)) == {"requests.nvidia.com/gpu": "2", "requests.nvidia.com/mig-3g.20gb": "2"}
    finally:
        SimProvider().delete_cluster("fresh")


def _edited(tmp_path: Path, old: str, new: str) -> Path:
    text = SPEC.read_text()
    assert text.count(old) == 1
    path = tmp_path / "edited.yaml"
    path.write_text(text.replace(old, new))
    return path


def test_plan_shows_exactly_the_edited_field_and_writes_nothing(applied: dict[str, str], tmp_path: Path) -> None:
    import subprocess
    import sys

    edited = _edited(tmp_path, "      gpus: 4\n", "      gpus: 6\n")
    probe = REAPPLY.replace('["-o", "json", "apply", "-f", sys.argv[1]]', '["-o", "json", "plan", "-f", sys.argv[1]]')
    proc = subprocess.run([sys.executable, "-c", probe, str(edited)], capture_output=True, text=True, env=applied,
                          timeout=300)
    report = json.loads(proc.stderr.strip().splitlines()[-1])
    assert report == {"code": 0, "writes": []}
    planned = json.loads(proc.stdout)
    changes = [p for p in planned if p["action"] not in ("no change", "check")]  # checks change nothing
    assert [p["step"] for p in changes] == ["ensure-tenant/team-a"]
    assert {p["step"] for p in planned if p["action"] == "check"} == {"validate/inference", "validate/training"}
    assert "-    requests.nvidia.com/gpu: '4'\n+    requests.nvidia.com/gpu: '6'" in changes[0]["diff"]


def test_a_held_lease_blocks_a_changing_apply_only(applied: dict[str, str], tmp_path: Path) -> None:
    from datetime import datetime, timezone

    from kubernetes import client, config

    api = client.CoordinationV1Api(config.new_client_from_config(applied["KUBECONFIG"]))
    now = datetime.now(timezone.utc).strftime("%Y-%m-%dT%H:%M:%S.%fZ")
    api.create_namespaced_lease("kube-system", {
        "metadata": {"name": "gpuctl-apply"},
        "spec": {"holderIdentity": "ci-runner/42", "leaseDurationSeconds": 300, "renewTime": now, "acquireTime": now}})
    try:
        converged = run_gpuctl("apply", "-f", str(SPEC), "--lock-timeout", "2", env=applied)
        assert converged.returncode == 0, converged.stderr  # nothing to write: no lock needed
        edited = _edited(tmp_path, "      gpus: 2\n", "      gpus: 3\n")
        blocked = run_gpuctl("apply", "-f", str(edited), "--lock-timeout", "2", env=applied)
        assert blocked.returncode == 7, blocked.stderr
        assert "another gpuctl apply holds the lock on cluster 'platform'" in blocked.stderr
        assert "holder ci-runner/42" in blocked.stderr
    finally:
        api.delete_namespaced_lease("gpuctl-apply", "kube-system")


@pytest.fixture
def relabelled(applied: dict[str, str]) -> Iterator[dict[str, str]]:
    """The shared cluster, applied from good.yaml again once the test has changed it."""
    yield applied
    proc = run_gpuctl("apply", "-f", str(SPEC), env=applied)
    assert proc.returncode == 0, proc.stderr


def test_concurrent_applies_take_turns(relabelled: dict[str, str], tmp_path: Path) -> None:
    applied = relabelled
    import subprocess
    import sys

    edited = _edited(tmp_path, "      workload: inference\n", "      workload: batch\n")
    procs = [subprocess.Popen([sys.executable, "-m", "gpuctl", "apply", "-f", str(edited)], env=applied,
                              stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True) for _ in range(2)]
    outputs = [p.communicate(timeout=300) for p in procs]
    assert [p.returncode for p in procs] == [0, 0], outputs
    nodes = {n["node"]: n for n in json.loads(run_gpuctl("status", "-o", "json", env=applied).stdout)["nodes"]}
    assert nodes["inference-0"]["product"] == "Tesla-T4-SHARED"
    from kubernetes import client, config

    api = config.new_client_from_config(applied["KUBECONFIG"])
    assert client.CoreV1Api(api).read_node("inference-0").metadata.labels["workload"] == "batch"
    leases = client.CoordinationV1Api(api).list_namespaced_lease("kube-system").items
    assert "gpuctl-apply" not in [lease.metadata.name for lease in leases]  # released
