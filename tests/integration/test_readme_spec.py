"""The documented example spec (docs/specs.md) applies with exit 0 on a fresh sim cluster, the first time
(the session's `platform` cluster, whose first apply is this spec's, on a cluster made for it), and over a
cluster `cluster create` made (a cluster of its own).

It used to end with exit 6 three times out of three ("device-plugin: gpu-operator/nvidia-device-plugin-daemonset:
4 of 5 pods ready", and `gpuctl validate` passing seconds later): the capacity wait did not await the
device plugin's rollout after the GPU Operator's upgrade and the plugin's restart. The wait now lasts until
the DaemonSet is rolled out as `kubectl rollout status` judges it, with its pods ready (gpuctl.ops.platform.capacity).
"""

from __future__ import annotations

import json
import re
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.conftest import run_gpuctl
from tests.integration.conftest import Platform

pytestmark = pytest.mark.integration
ROOT = Path(__file__).resolve().parents[2]
SPEC = ROOT / "tests" / "specs" / "readme-platform.yaml"


def test_the_spec_file_is_the_docs_example() -> None:
    """The example of docs/specs.md (section "The spec file"), which the README links to."""
    page = (ROOT / "docs" / "specs.md").read_text()
    section = page[page.index("## The spec file"):]
    block = re.search(r"```yaml\n(.*?)```", section, re.S)
    assert block is not None and block[1] == SPEC.read_text()


@pytest.fixture
def fresh(sim_env: dict[str, str], tmp_path: Path) -> Iterator[dict[str, str]]:
    """A state dir of its own: the spec's cluster is made fresh, whatever else the session runs."""
    env = dict(sim_env, GPUCTL_STATE_DIR=str(tmp_path / "state"), KUBECONFIG=str(tmp_path / "kubeconfig"))
    yield env
    proc = run_gpuctl("cluster", "delete", "--cloud", "sim", "--name", "platform", "--yes", env=env)
    assert proc.returncode == 0, proc.stderr


def apply_and_validate(env: dict[str, str]) -> None:
    """`apply -f` the documented spec: exit 0 the first time, the device plugin rolled out; then `validate`
    sees what apply saw."""
    started = time.monotonic()
    proc = run_gpuctl("-o", "json", "apply", "-f", str(SPEC), env=env)
    took = time.monotonic() - started
    assert proc.returncode == 0, proc.stderr
    first_run_validates(env, json.loads(proc.stdout), took)


def first_run_validates(env: dict[str, str], result: dict[str, Any], took: float) -> None:
    """A first `apply -f` of the spec (its JSON, taking `took` s) validated with the device plugin rolled out; then
    `validate` sees what apply saw."""
    steps = {s["step"]: s["outcome"] for s in result["steps"]}
    assert steps["validate/inference"] == steps["validate/training"] == "passed"
    checks = [c for c in result["checks"] if c["check"] == "device-plugin"]
    assert checks and all(c["ok"] and "rolled out" in c["detail"] for c in checks), checks
    print(f"\napply -f {SPEC.name}: exit 0 in {took:.1f}s ({steps['install-gpu-operator']} the GPU Operator)")

    proc = run_gpuctl("-o", "json", "validate", env=env)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    daemon_set = kubectl_json(env, "get", "daemonset", "-n", "gpu-operator", "nvidia-device-plugin-daemonset")
    status = daemon_set["status"]
    assert daemon_set["metadata"]["generation"] <= status["observedGeneration"]
    nodes = len(json.loads(run_gpuctl("-o", "json", "status", env=env).stdout)["nodes"])
    assert status["updatedNumberScheduled"] == status["numberAvailable"] == status["desiredNumberScheduled"] == nodes


def test_the_readme_spec_applies_on_a_fresh_cluster_the_first_time(platform: Platform) -> None:
    steps = {s["step"]: s["outcome"] for s in platform.first_run["steps"]}
    assert steps["ensure-cluster"] == "created"  # the first run made the cluster: the spec's first apply
    first_run_validates(platform.env, platform.first_run, platform.first_run_s)


def test_the_readme_spec_applies_over_a_cluster_create_the_first_time(fresh: dict[str, str]) -> None:
    """A cluster of its own (not the shared `platform`): what it proves is the first apply over what `cluster
    create` made, so the cluster must be made here, just before."""
    # A cluster of the spec's name made by `cluster create` (2 T4 nodes sliced 4 ways), then the spec: a Helm
    # upgrade of the GPU Operator (MIG strategy, MIG manager config) and a device-plugin restart, so its
    # DaemonSet rolls over 5 nodes while apply waits. This ended with exit 6 ("4 of 5 pods ready").
    proc = run_gpuctl("cluster", "create", "--cloud", "sim", "--name", "platform", "--gpu", "t4", "--nodes", "2",
                      "--slices", "4", env=fresh)
    assert proc.returncode == 0, proc.stderr
    apply_and_validate(fresh)


def kubectl_json(env: dict[str, str], *args: str) -> dict[str, Any]:
    import subprocess

    from tests.support.tools import find_tool

    kubectl = find_tool("kubectl")
    assert kubectl is not None
    out = subprocess.run([str(kubectl), "--kubeconfig", env["KUBECONFIG"], *args, "-o", "json"], env=env,
                         capture_output=True, text=True, check=True, timeout=60).stdout
    return json.loads(out)
