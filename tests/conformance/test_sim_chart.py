"""The sim's bundled GPU Operator chart against NVIDIA's v26.7.0 chart (../shared/upstream): rendered by
real helm with the same gpuctl values, their ClusterPolicies agree on every field gpuctl sets or the
simulated operator reads, so the sim operator acts on what a real operator would be given."""

from __future__ import annotations

import subprocess
from pathlib import Path
from typing import Any

import pytest
import yaml

from tests.support.model import DEFAULT_GPU_TAINTS, GPU_OPERATOR, StackSpec, Taint, chart_ref
from tests.support.stack import operator_values
from tests.support.tools import ensure_tools

pytestmark = pytest.mark.conformance  # the upstream charts rendered by the pinned helm (downloaded once)

UPSTREAM_CHART = Path(__file__).resolve().parents[2].parent / "shared/upstream/gpu-operator-v26.7.0/gpu-operator"
# Spec fields of the ClusterPolicy that gpuctl's values set, or the simulated operator acts on.
FIELDS = ("driver.enabled", "toolkit.enabled", "devicePlugin.enabled", "devicePlugin.config", "mig", "cdi.enabled",
          "migManager.enabled", "migManager.config", "dcgm.enabled", "dcgmExporter.enabled", "gfd.enabled",
          "nodeStatusExporter.enabled", "daemonsets.tolerations")
REQUIRED = ("daemonsets", "dcgm", "dcgmExporter", "devicePlugin", "driver", "gfd", "nodeStatusExporter", "operator",
            "toolkit")  # spec.required of the real ClusterPolicy CRD


@pytest.fixture(scope="module")
def helm() -> Path:
    return ensure_tools(["helm"])[0].path


def cluster_policy(helm: Path, chart: str, values: dict[str, Any], tmp_path: Path) -> dict[str, Any]:
    values_file = tmp_path / "values.yaml"
    values_file.write_text(yaml.safe_dump(values))
    out = subprocess.run([str(helm), "template", "gpu-operator", chart, "-n", "gpu-operator", "-f", str(values_file)],
                         capture_output=True, text=True, check=True).stdout
    return next(d for d in yaml.safe_load_all(out) if d and d.get("kind") == "ClusterPolicy")


def field(spec: Any, path: str) -> Any:
    for key in path.split("."):
        spec = (spec or {}).get(key)
    return spec


STACKS = {
    "plain": StackSpec(charts="bundled", driver=False, toolkit=False, taints=DEFAULT_GPU_TAINTS),
    "time-slicing": StackSpec(charts="bundled", driver=False, toolkit=False, taints=DEFAULT_GPU_TAINTS,
                              shares_gpus=True),
    "mps-single": StackSpec(charts="bundled", mig_strategy="single", taints=DEFAULT_GPU_TAINTS, shares_gpus=True),
    "nfd-operator-extra-taint": StackSpec(charts="bundled", nfd="operator", driver=False, toolkit=False,
                                          taints=(*DEFAULT_GPU_TAINTS, Taint("dedicated", "gpu", "NoSchedule"))),
}


@pytest.mark.parametrize("name", STACKS)
def test_bundled_and_real_cluster_policies_agree(helm: Path, tmp_path: Path, name: str) -> None:
    values = operator_values(STACKS[name])
    real = cluster_policy(helm, str(UPSTREAM_CHART), values, tmp_path)["spec"]
    sim = cluster_policy(helm, chart_ref(GPU_OPERATOR, "bundled").ref, values, tmp_path)["spec"]
    for path in FIELDS:
        assert field(sim, path) == field(real, path), path
    assert set(REQUIRED) <= set(sim)
