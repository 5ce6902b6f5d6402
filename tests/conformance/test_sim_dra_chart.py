"""The sim's bundled DRA driver chart against the real one (kubernetes-sigs/dra-driver-nvidia-gpu 0.4.1 in
../shared/upstream): rendered by real helm with gpuctl's values, both give the same DeviceClasses and a
kubelet plugin DaemonSet that lands on the same nodes with the same settings, and both refuse what the real
chart refuses."""

from __future__ import annotations

import subprocess
from pathlib import Path
from typing import Any

import pytest
import yaml

from tests.support.model import DEFAULT_GPU_TAINTS, DRA_DRIVER, StackSpec, Taint, chart_ref
from tests.support.stack import DRA_DRIVER_NAMESPACE as NAMESPACE
from tests.support.stack import DRA_DRIVER_RELEASE as RELEASE
from tests.support.stack import dra_values
from tests.support.tools import KUBERNETES_VERSION, ensure_tools

pytestmark = pytest.mark.conformance  # the upstream charts rendered by the pinned helm (downloaded once)

UPSTREAM_CHART = Path(__file__).resolve().parents[2].parent / "shared/upstream/dra-driver-nvidia-gpu-v0.4.1" / DRA_DRIVER
SERVED = ("--kube-version", KUBERNETES_VERSION, "--api-versions", "resource.k8s.io/v1")

STACKS = {
    "host-driver": StackSpec(charts="bundled", taints=DEFAULT_GPU_TAINTS, dra=True),
    "operator-driver-extra-taint": StackSpec(charts="bundled", driver=True, toolkit=True, dra=True,
                                             taints=(*DEFAULT_GPU_TAINTS, Taint("dedicated", "gpu", "NoSchedule"))),
    "alpha-sharing": StackSpec(charts="bundled", taints=DEFAULT_GPU_TAINTS, dra=True, dra_alpha_sharing=True),
    # a node group's dra: true, the device plugin serving the others: the plugin only on the marked nodes
    "dra-groups": StackSpec(charts="bundled", taints=DEFAULT_GPU_TAINTS, dra_groups=("a",)),
}


@pytest.fixture(scope="module")
def helm() -> Path:
    return ensure_tools(["helm"])[0].path


def render(helm: Path, chart: str, values: dict[str, Any], tmp_path: Path,
           served: tuple[str, ...] = SERVED) -> subprocess.CompletedProcess[str]:
    values_file = tmp_path / "values.yaml"
    values_file.write_text(yaml.safe_dump(values))
    return subprocess.run([str(helm), "template", RELEASE, chart, "-n", NAMESPACE, "-f", str(values_file), *served],
                          capture_output=True, text=True)


def objects(out: str) -> dict[tuple[str, str], dict[str, Any]]:
    return {(d["kind"], d["metadata"]["name"]): d for d in yaml.safe_load_all(out) if d}


def plugin_facts(daemon_set: dict[str, Any]) -> dict[str, Any]:
    """What decides where the kubelet plugin runs and how: everything the simulated plugin relies on."""
    pod = daemon_set["spec"]["template"]
    gpus = next(c for c in pod["spec"]["containers"] if c["name"] == "gpus")
    env = {e["name"]: e.get("value") for e in gpus["env"] if e["name"] in ("NVIDIA_DRIVER_ROOT", "FEATURE_GATES")}
    labels = pod["metadata"]["labels"]
    return {"name": daemon_set["metadata"]["name"], "namespace": daemon_set["metadata"]["namespace"],
            "selector": daemon_set["spec"]["selector"], "component": labels.get(f"{DRA_DRIVER}-component"),
            "app": (labels.get("app.kubernetes.io/name"), labels.get("app.kubernetes.io/instance")),
            "affinity": pod["spec"].get("affinity"), "nodeSelector": pod["spec"].get("nodeSelector"),
            "tolerations": pod["spec"].get("tolerations"), "env": env}


@pytest.mark.parametrize("name", STACKS)
def test_bundled_and_real_charts_agree(helm: Path, tmp_path: Path, name: str) -> None:
    values = dra_values(STACKS[name])
    real = render(helm, str(UPSTREAM_CHART), values, tmp_path)
    sim = render(helm, chart_ref(DRA_DRIVER, "bundled").ref, values, tmp_path)
    assert real.returncode == 0, real.stderr
    assert sim.returncode == 0, sim.stderr
    real_objects, sim_objects = objects(real.stdout), objects(sim.stdout)
    for device_class in ("gpu.nvidia.com", "mig.nvidia.com"):
        assert sim_objects["DeviceClass", device_class] == real_objects["DeviceClass", device_class]
    plugin = f"{DRA_DRIVER}-kubelet-plugin"
    assert plugin_facts(sim_objects["DaemonSet", plugin]) == plugin_facts(real_objects["DaemonSet", plugin])
    # gpuctl's values leave ComputeDomains (and with them the controller) out of the real chart
    assert not any(kind == "Deployment" for kind, _ in real_objects)


def test_both_refuse_gpus_beside_a_device_plugin(helm: Path, tmp_path: Path) -> None:
    values = {**dra_values(STACKS["host-driver"]), "gpuResourcesEnabledOverride": False}
    for chart in (str(UPSTREAM_CHART), chart_ref(DRA_DRIVER, "bundled").ref):
        result = render(helm, chart, values, tmp_path)
        assert result.returncode != 0 and "gpuResourcesEnabledOverride" in result.stderr, chart

