"""Conformance on a real API server: what gpuctl renders, server-side applied (dry run) to the real CRDs.

The session's sim cluster (kube-apiserver v1.36) gets the unmodified upstream CRDs from
../shared/upstream: ClusterPolicy from the GPU Operator chart v26.7.0, NodePool and EC2NodeClass from
karpenter-provider-aws v1.14.1. They replace any stand-in of the same name (the sim chart's permissive
ClusterPolicy CRD: what that chart renders must be valid under the real schema) and stay installed.
Dry runs write nothing; kubectl's default strict field validation refuses unknown fields too.
"""

from __future__ import annotations

import copy
import subprocess
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
import yaml

from gpuctl.api import GroupPlan
from tests.conformance.test_operator_chart import CASES, OPERATOR_CHART, UPSTREAM, helm_template, only, spec_text
from tests.conftest import run_gpuctl
from tests.integration.conftest import SimCluster
from tests.support.eks import AMI_ALIASES, EC2_NODE_CLASS, NODEGROUP_LABEL, render_ec2nodeclass
from tests.support.model import DEFAULT_GPU_TAINTS, NodeGroupSpec, Sharing, Taint, get_gpu, parse_layout
from tests.support.stack import render_nodeoverlay, render_nodepool
from tests.support.tools import ensure_tools
from tests.support.util import data_dir

pytestmark = pytest.mark.integration

KARPENTER = UPSTREAM / "karpenter-provider-aws-v1.14.1"
CRDS = (OPERATOR_CHART / "crds" / "nvidia.com_clusterpolicies.yaml", KARPENTER / "karpenter.sh_nodepools.yaml",
        KARPENTER / "karpenter.sh_nodeoverlays.yaml", KARPENTER / "karpenter.k8s.aws_ec2nodeclasses.yaml")
BUNDLED_CHART = data_dir("templates") / "charts" / "gpu-operator"
VALUES = Path("helm") / "gpu-operator.values.yaml"  # in the output of `gpuctl render --out`


@dataclass(frozen=True)
class Kubectl:
    binary: Path
    kubeconfig: Path

    def __call__(self, *args: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run([str(self.binary), "--kubeconfig", str(self.kubeconfig), *args],
                              capture_output=True, text=True, timeout=120)

    def dry_run(self, path: Path, manager: str) -> subprocess.CompletedProcess[str]:
        """Server-side apply, dry run on the server. Forced: the session cluster's objects of the same
        names (written by gpuctl and helm) must not turn a schema check into a field-ownership conflict."""
        return self("apply", "--server-side", "--dry-run=server", "--force-conflicts", "--field-manager", manager,
                    "-f", str(path))


def write(path: Path, *objects: dict[str, Any]) -> Path:
    path.write_text(yaml.safe_dump_all(objects))
    return path


def cluster_policy(chart: Path, values: Path) -> dict[str, Any]:
    """The ClusterPolicy `helm template` renders from `chart` with a values file of `gpuctl render`."""
    [policy] = only(helm_template(chart, "gpu-operator", values), "ClusterPolicy")
    return policy


@pytest.fixture(scope="module")
def kubectl(sim_cluster: SimCluster, tmp_path_factory: pytest.TempPathFactory) -> Kubectl:
    [tool] = ensure_tools(["kubectl"])
    kubectl = Kubectl(tool.path, sim_cluster.kubeconfig)
    for crd in CRDS:
        proc = kubectl("apply", "--server-side", "--force-conflicts", "-f", str(crd))
        assert proc.returncode == 0, proc.stderr
    names = [f"crd/{yaml.safe_load(crd.read_text())['metadata']['name']}" for crd in CRDS]
    proc = kubectl("wait", "--for=condition=Established", "--timeout=60s", *names)
    assert proc.returncode == 0, proc.stderr
    # A replaced CRD stays Established; its new schema is served once the API server's informer sees it.
    probe = write(tmp_path_factory.mktemp("probe") / "probe.yaml", {
        "apiVersion": "nvidia.com/v1", "kind": "ClusterPolicy", "metadata": {"name": "schema-probe"},
        "spec": {"mig": {"strategy": "bogus"}}})
    deadline = time.monotonic() + 30
    while kubectl.dry_run(probe, "probe").returncode == 0:
        assert time.monotonic() < deadline, "the API server still serves the stand-in ClusterPolicy schema"
        time.sleep(0.2)
    return kubectl


@pytest.fixture(scope="module")
def rendered_d(sim_cluster: SimCluster, tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    """The real chart's ClusterPolicy for case d (A100 MIG, mixed), from `gpuctl render`'s values."""
    work = tmp_path_factory.mktemp("rendered-d")
    return cluster_policy(OPERATOR_CHART, render(sim_cluster, "d-a100-mig-mixed", work) / VALUES)


def render(sim_cluster: SimCluster, case_id: str, work: Path) -> Path:
    """`gpuctl render --out` of a case's spec; the output directory."""
    spec = work / "spec.yaml"
    spec.write_text(spec_text(CASES[case_id].node_groups, CASES[case_id].gpu_operator))
    proc = run_gpuctl("render", "-f", str(spec), "--out", str(work / "out"), env=sim_cluster.env)
    assert proc.returncode == 0, proc.stderr
    return work / "out"


# -- the GPU Operator: gpuctl's manifests and the ClusterPolicy of the real chart --------------------

@pytest.mark.parametrize("case_id", list(CASES))
def test_rendered_manifests_apply(case_id: str, kubectl: Kubectl, sim_cluster: SimCluster, tmp_path: Path) -> None:
    # gpu-operator, the namespace of the ConfigMaps, exists: the session cluster runs the stack
    proc = kubectl.dry_run(render(sim_cluster, case_id, tmp_path) / "manifests", "gpuctl")
    assert proc.returncode == 0, proc.stderr


@pytest.mark.parametrize("chart", [OPERATOR_CHART, BUNDLED_CHART], ids=["upstream-v26.7.0", "bundled-sim"])
@pytest.mark.parametrize("case_id", list(CASES))
def test_cluster_policy_applies(case_id: str, chart: Path, kubectl: Kubectl, sim_cluster: SimCluster,
                                tmp_path: Path) -> None:
    policy = cluster_policy(chart, render(sim_cluster, case_id, tmp_path) / VALUES)
    proc = kubectl.dry_run(write(tmp_path / "policy.yaml", policy), "helm")
    assert proc.returncode == 0, proc.stderr


def test_real_crd_refuses_an_unknown_mig_strategy(kubectl: Kubectl, rendered_d: dict[str, Any], tmp_path: Path) -> None:
    """The negative control: the dry runs above can fail."""
    assert kubectl.dry_run(write(tmp_path / "ok.yaml", rendered_d), "helm").returncode == 0
    policy = copy.deepcopy(rendered_d)
    policy["spec"]["mig"]["strategy"] = "bogus"
    proc = kubectl.dry_run(write(tmp_path / "bogus.yaml", policy), "helm")
    assert proc.returncode != 0
    assert 'spec.mig.strategy: Unsupported value: "bogus"' in proc.stderr


def test_real_crd_refuses_a_null_device_plugin_default(kubectl: Kubectl, rendered_d: dict[str, Any],
                                                      tmp_path: Path) -> None:
    """Why the chart test walks the ClusterPolicy for nulls. kube-apiserver v1.36 answers:
    The ClusterPolicy "cluster-policy" is invalid: spec.devicePlugin.config.default: Invalid value: "null":
    spec.devicePlugin.config.default in body must be of type string: "null"
    """
    policy = copy.deepcopy(rendered_d)
    policy["spec"]["devicePlugin"]["config"] = {"name": "gpuctl-device-plugin-config", "default": None}
    proc = kubectl.dry_run(write(tmp_path / "null.yaml", policy), "helm")
    assert proc.returncode == 1
    assert 'spec.devicePlugin.config.default in body must be of type string: "null"' in proc.stderr


# -- Karpenter v1.14.1 -------------------------------------------------------------------------------


@pytest.mark.parametrize("gpu", ["t4", "a100-40gb"])
def test_nodepool_and_ec2nodeclass_apply(gpu: str, kubectl: Kubectl, tmp_path: Path) -> None:
    model = get_gpu(gpu)
    taints = (*DEFAULT_GPU_TAINTS, Taint("dedicated", "training", "NoExecute"), Taint("spot", "", "NoSchedule"))
    group = NodeGroupSpec(gpu, model, 2, model.default_gpus_per_node, taints=taints)
    # sharing or a MIG layout: the pool's template carries its config label, which the CRD must accept
    plan = GroupPlan(group, Sharing("time-slicing", 4)) if gpu == "t4" else \
        GroupPlan(group, mig=parse_layout("3g.20gb-2x2g.10gb", model))
    pool = render_nodepool(plan, 4, NODEGROUP_LABEL, EC2_NODE_CLASS, "mixed")
    overlay = render_nodeoverlay(plan, "mixed")
    assert overlay is not None  # a sharing group and a MIG group each have one
    node_class = render_ec2nodeclass("itest", "gpuctl-itest-node", "AL2023_x86_64_NVIDIA")
    proc = kubectl.dry_run(write(tmp_path / "karpenter.yaml", node_class, pool, overlay), "gpuctl")
    assert proc.returncode == 0, proc.stderr


def test_real_nodeoverlay_crd_refuses_cpu_capacity(kubectl: Kubectl, tmp_path: Path) -> None:
    """The negative control for the NodeOverlay CRD: an overlay may not touch cpu/memory/pods."""
    overlay = render_nodeoverlay(GroupPlan(NodeGroupSpec("t4", get_gpu("t4"), 1, 1), Sharing("time-slicing", 4)),
                                 "mixed")
    assert overlay is not None
    overlay["spec"]["capacity"]["cpu"] = "8"
    proc = kubectl.dry_run(write(tmp_path / "overlay.yaml", overlay), "gpuctl")
    assert proc.returncode != 0
    assert "invalid resource restricted" in proc.stderr


@pytest.mark.parametrize("ami_type", list(AMI_ALIASES))
def test_ec2nodeclass_of_every_ami_type_applies(ami_type: str, kubectl: Kubectl, tmp_path: Path) -> None:
    node_class = render_ec2nodeclass("itest", "gpuctl-itest-node", ami_type)
    proc = kubectl.dry_run(write(tmp_path / "node-class.yaml", node_class), "gpuctl")
    assert proc.returncode == 0, proc.stderr


def test_real_nodepool_crd_refuses_a_bad_consolidation_policy(kubectl: Kubectl, tmp_path: Path) -> None:
    """The negative control for Karpenter: its CRD is not a permissive stand-in."""
    pool = render_nodepool(GroupPlan(NodeGroupSpec("t4", get_gpu("t4"), 1, 1)), 1, NODEGROUP_LABEL, EC2_NODE_CLASS, "mixed")
    pool["spec"]["disruption"]["consolidationPolicy"] = "Sometimes"
    proc = kubectl.dry_run(write(tmp_path / "pool.yaml", pool), "gpuctl")
    assert proc.returncode != 0
    assert 'spec.disruption.consolidationPolicy: Unsupported value: "Sometimes"' in proc.stderr
