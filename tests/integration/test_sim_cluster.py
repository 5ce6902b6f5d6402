"""The sim provider against a real kube-apiserver with kwok nodes."""

from __future__ import annotations

import json
import stat
import subprocess

import pytest

from tests.conftest import run_gpuctl
from tests.integration.conftest import SimCluster
from tests.support.kube import Kube, KubeConflict
from tests.support.model import GPUS
from tests.support.sim import KwokCluster, SimOperator
from tests.support.tools import find_tool

pytestmark = pytest.mark.integration

A100 = GPUS["a100-40gb"]


def _ready(node) -> bool:
    return any(c.type == "Ready" and c.status == "True" for c in node.status.conditions or [])


def test_create_makes_ready_gpu_nodes_labelled_from_the_catalog(sim_cluster: SimCluster) -> None:
    nodes = sim_cluster.core().list_node(label_selector="gpuctl.dev/nodegroup=gpu").items
    assert sorted(n.metadata.name for n in nodes) == ["gpu-0", "gpu-1", "gpu-2"]
    for node in nodes:
        assert _ready(node), node.metadata.name
        assert node.status.allocatable["nvidia.com/gpu"] == "8"
        assert node.status.capacity["nvidia.com/gpu"] == "8"
        labels = node.metadata.labels
        assert labels["nvidia.com/gpu.product"] == A100.product == "NVIDIA-A100-SXM4-40GB"
        assert labels["nvidia.com/gpu.memory"] == str(A100.memory_mib)
        assert labels["nvidia.com/gpu.count"] == "8"
        assert labels["nvidia.com/gpu.family"] == "ampere"
        assert (labels["nvidia.com/gpu.compute.major"], labels["nvidia.com/gpu.compute.minor"]) == ("8", "0")
        assert labels["nvidia.com/mig.capable"] == "true"
        assert labels["nvidia.com/cuda.driver-version.full"].count(".") == 2
        assert labels["feature.node.kubernetes.io/pci-10de.present"] == "true"
        assert labels["app.kubernetes.io/managed-by"] == "gpuctl"


def test_second_create_changes_nothing(sim_cluster: SimCluster) -> None:
    v1 = sim_cluster.core()
    before = {n.metadata.name: (n.metadata.uid, n.metadata.labels) for n in v1.list_node().items}
    kubeconfig_before = sim_cluster.kubeconfig.read_bytes()
    proc = run_gpuctl("--kubeconfig", str(sim_cluster.kubeconfig), "-o", "json", "cluster", "create",
                      "--cloud", "sim", "--name", sim_cluster.name, "--gpu", "a100-40gb", "--nodes", "3",
                      env=sim_cluster.env)
    assert proc.returncode == 0, proc.stderr
    result = json.loads(proc.stdout)
    assert result["changed"] is False, [s for s in result["steps"] if s["outcome"] != "no change"]
    assert {s["outcome"] for s in result["steps"]} == {"no change"}
    assert "no change" in proc.stderr
    after = {n.metadata.name: (n.metadata.uid, n.metadata.labels) for n in v1.list_node().items}
    assert after == before
    assert sim_cluster.kubeconfig.read_bytes() == kubeconfig_before


def test_create_repairs_a_drifted_node_group_label(sim_cluster: SimCluster) -> None:
    v1 = sim_cluster.core()
    v1.patch_node("gpu-1", {"metadata": {"labels": {"app.kubernetes.io/managed-by": "someone"}}},
                  _content_type="application/merge-patch+json")
    proc = run_gpuctl("-o", "json", "--kubeconfig", str(sim_cluster.kubeconfig), "cluster", "create",
                      "--name", sim_cluster.name, "--gpu", "a100-40gb", "--nodes", "3", env=sim_cluster.env)
    assert proc.returncode == 0, proc.stderr
    steps = {s["step"]: s["outcome"] for s in json.loads(proc.stdout)["steps"]}
    assert steps["ensure-nodegroup/gpu"] == "updated"
    assert v1.read_node("gpu-1").metadata.labels["app.kubernetes.io/managed-by"] == "gpuctl"


def test_sim_operator_never_writes_from_a_stale_node(sim_cluster: SimCluster, tmp_path) -> None:
    """The sim operator decided from a node read before gpuctl relabelled it: the API server refuses its
    write (resourceVersion) and the relabel stands. (CI once saw the MIG manager's all-disabled default
    land over the layout apply had just set.)"""
    v1 = sim_cluster.core()
    stale = Kube.connect(sim_cluster.kubeconfig).list("v1", "Node", labels="gpuctl.dev/nodegroup=gpu")[0]
    name = stale.name
    v1.patch_node(name, {"metadata": {"labels": {"test.gpuctl.dev/relabelled": "yes"}}})
    operator = SimOperator(sim_cluster.kubeconfig, tmp_path)
    with pytest.raises(KubeConflict):
        operator._patch_node(stale, {"test.gpuctl.dev/relabelled": "no"}, {}, {})
    assert v1.read_node(name).metadata.labels["test.gpuctl.dev/relabelled"] == "yes"
    v1.patch_node(name, {"metadata": {"labels": {"test.gpuctl.dev/relabelled": None}}})


def test_kubeconfig_is_private_and_authenticates(sim_cluster: SimCluster) -> None:
    assert stat.S_IMODE(sim_cluster.kubeconfig.stat().st_mode) == 0o600
    kubectl = find_tool("kubectl")
    out = subprocess.run([str(kubectl), "--kubeconfig", str(sim_cluster.kubeconfig), "get", "nodes", "-o", "name"],
                         capture_output=True, text=True, timeout=30)
    assert out.returncode == 0, out.stderr
    assert "node/gpu-0" in out.stdout
    text = sim_cluster.kubeconfig.read_text()
    assert "current-context: gpuctl-sim-itest" in text
    assert "client-certificate-data" in text and "client-certificate:" not in text


def test_control_plane_listens_on_loopback_only(sim_cluster: SimCluster) -> None:
    pids = KwokCluster(sim_cluster.name).pids()
    assert set(pids) >= {"etcd", "kube-apiserver", "kube-controller-manager", "kube-scheduler", "kwok-controller",
                         "gpuctl-sim-operator"}
    for component, pid in pids.items():
        if component == "gpuctl-sim-operator":
            continue  # a client of the API server, it listens nowhere
        cmdline = open(f"/proc/{pid}/cmdline").read().split("\0")
        assert len(cmdline) > 1, (component, cmdline)  # the program and its flags: a live process
        assert not any("0.0.0.0" in arg for arg in cmdline), component
    apiserver = open(f"/proc/{pids['kube-apiserver']}/cmdline").read().split("\0")
    assert "--bind-address=127.0.0.1" in apiserver


def test_controllers_run_at_a_large_clusters_client_rates(sim_cluster: SimCluster) -> None:
    """kube-controller-manager and kube-scheduler took the client rates of templates/sim/kwokctl.yaml.j2 and run
    with them (a flag either refused would have stopped it)."""
    pids = KwokCluster(sim_cluster.name).pids()
    manager = open(f"/proc/{pids['kube-controller-manager']}/cmdline").read().split("\0")
    scheduler = open(f"/proc/{pids['kube-scheduler']}/cmdline").read().split("\0")
    assert {"--kube-api-qps=1000", "--kube-api-burst=1000"} <= set(manager), manager
    assert {"--kube-api-qps=1200", "--kube-api-burst=1200"} <= set(scheduler), scheduler
    assert not any(a.startswith("--config") for a in scheduler), scheduler


def test_cluster_list_shows_the_running_cluster(sim_cluster: SimCluster) -> None:
    proc = run_gpuctl("cluster", "list", "--cloud", "sim", "-o", "json", env=sim_cluster.env)
    assert proc.returncode == 0, proc.stderr
    clusters = {c["name"]: c for c in json.loads(proc.stdout)}
    assert clusters[sim_cluster.name]["status"] == "running"
    assert clusters[sim_cluster.name]["endpoint"].startswith("https://127.0.0.1:")


def test_nodegroup_add_scale_list_delete(sim_cluster: SimCluster) -> None:
    base = ("--cloud", "sim", "--cluster", sim_cluster.name, "--name", "inference")
    proc = run_gpuctl("nodegroup", "add", *base, "--gpu", "t4", "--nodes", "2", env=sim_cluster.env)
    assert proc.returncode == 0, proc.stderr
    v1 = sim_cluster.core()

    def members() -> dict[str, dict[str, str]]:
        items = v1.list_node(label_selector="gpuctl.dev/nodegroup=inference").items
        return {n.metadata.name: n.metadata.labels for n in items if _ready(n)}

    assert sorted(members()) == ["inference-0", "inference-1"]
    assert members()["inference-0"]["nvidia.com/gpu.product"] == "Tesla-T4"
    assert members()["inference-0"]["nvidia.com/mig.capable"] == "false"

    proc = run_gpuctl("nodegroup", "list", "--cloud", "sim", "--cluster", sim_cluster.name, "-o", "json",
                      env=sim_cluster.env)
    groups = {g["name"]: g for g in json.loads(proc.stdout)}
    assert groups["gpu"]["nodes"] == 3 and groups["gpu"]["gpusPerNode"] == 8
    assert groups["inference"] == {"name": "inference", "cluster": sim_cluster.name, "gpu": "t4", "nodes": 2,
                                   "readyNodes": 2, "gpusPerNode": 1, "scaling": "cloud", "minNodes": 2,
                                   "maxNodes": 2, "launched": 0,
                                   "sharing": None, "migLayout": None, "slices": None, "allocatable": None}

    assert run_gpuctl("nodegroup", "scale", *base, "--nodes", "4", env=sim_cluster.env).returncode == 0
    assert sorted(members()) == [f"inference-{i}" for i in range(4)]
    assert run_gpuctl("nodegroup", "scale", *base, "--nodes", "1", env=sim_cluster.env).returncode == 0
    assert sorted(members()) == ["inference-0"]

    changed_gpu = run_gpuctl("nodegroup", "add", *base, "--gpu", "l4", env=sim_cluster.env)
    assert changed_gpu.returncode == 2
    assert "--gpu: node group 'inference' already has t4 GPUs" in changed_gpu.stderr

    proc = run_gpuctl("nodegroup", "delete", *base, "--yes", env=sim_cluster.env)
    assert proc.returncode == 0, proc.stderr
    assert v1.list_node(label_selector="gpuctl.dev/nodegroup=inference").items == []
    missing = run_gpuctl("nodegroup", "scale", *base, "--nodes", "2", env=sim_cluster.env)
    assert missing.returncode == 2 and "node group 'inference' not found" in missing.stderr
