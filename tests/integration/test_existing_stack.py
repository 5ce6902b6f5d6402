"""Clusters that already carry a GPU stack when gpuctl arrives (gpu-facts.md, "Clusters that already
have a GPU stack"), on one sim cluster whose nodes and stack the test sets up itself:
- eksctl's `nvidia-device-plugin-daemonset` and a device plugin on the host (Bottlerocket, EKS Auto
  Mode) are refused with exit 2 and the fix, before anything is written;
- NVIDIA's real v26.7.0 chart installed as Magnum's Cluster API driver does it (release
  `nvidia-gpu-operator` in gpu-operator, its NFD off, a separate NFD release) is configured through its
  ClusterPolicy: no second operator, plugin or NFD, and time-slicing works."""

from __future__ import annotations

import json
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.conftest import run_gpuctl
from tests.support.model import DEFAULT_CONFIG_KEY
from tests.support.tools import find_tool

pytestmark = pytest.mark.integration
UPSTREAM = Path(__file__).resolve().parents[2].parent / "shared" / "upstream"
CLUSTER = "existing"
OLD_PLUGIN = "v0.17.0"  # below NVIDIA's security floor for the device plugin (gpuctl/model/security.py)
CREATE = ("cluster", "create", "--cloud", "sim", "--name", CLUSTER, "--gpu", "t4", "--nodes", "2", "--slices", "4")
EKSCTL_PLUGIN = {
    "apiVersion": "apps/v1", "kind": "DaemonSet",
    "metadata": {"name": "nvidia-device-plugin-daemonset", "namespace": "kube-system"},
    "spec": {"selector": {"matchLabels": {"name": "nvidia-device-plugin-ds"}},
             "template": {"metadata": {"labels": {"name": "nvidia-device-plugin-ds"}},
                          "spec": {"tolerations": [{"key": "nvidia.com/gpu", "operator": "Exists",
                                                    "effect": "NoSchedule"}],
                                   "containers": [{"name": "nvidia-device-plugin-ctr",
                                                   "image": "nvcr.io/nvidia/k8s-device-plugin:v0.17.0"}]}}}}


@pytest.fixture(scope="module")
def bare(sim_env: dict[str, str], tmp_path_factory: pytest.TempPathFactory) -> Iterator[dict[str, str]]:
    """A sim cluster with two T4 nodes and no GPU stack, as a cloud hands one over (nodes made by the
    provider, as `nodegroup add` does; no gpuctl apply yet)."""
    from tests.support.kube import write_kubeconfig
    from tests.support.model import NodeGroupSpec, get_gpu
    from tests.support.sim import SimProvider

    kubeconfig = tmp_path_factory.mktemp("existing") / "kubeconfig"
    env = dict(sim_env, KUBECONFIG=str(kubeconfig))
    provider = SimProvider()
    try:
        provider.ensure_cluster(CLUSTER)
        provider.ensure_node_group(CLUSTER, NodeGroupSpec("gpu", get_gpu("t4"), 2, 1))
        write_kubeconfig(provider.kubeconfig(CLUSTER), kubeconfig)
        yield env
    finally:
        assert run_gpuctl("cluster", "delete", "--cloud", "sim", "--name", CLUSTER, "--yes", env=env).returncode == 0


def clients(env: dict[str, str]) -> tuple[Any, Any]:
    from kubernetes import client, config

    api = config.new_client_from_config(env["KUBECONFIG"])
    return client.CoreV1Api(api), client.AppsV1Api(api)


def untouched(env: dict[str, str]) -> dict[str, Any]:
    """What a refused run must leave as it was: the GPU nodes' taints and the labels gpuctl's cluster-side
    steps set (nvidia.com/*, gpuctl.dev/*), Helm releases, namespaces. Kubernetes' own node.kubernetes.io/*
    taints are left out: the node lifecycle controller lifts not-ready from a node that has just joined."""
    v1, _ = clients(env)
    return {"nodes": {n.metadata.name: ({k: v for k, v in n.metadata.labels.items()
                                         if k.startswith(("nvidia.com/", "gpuctl.dev/"))},
                                        [t.to_dict() for t in n.spec.taints or []
                                         if not t.key.startswith("node.kubernetes.io/")])
                      for n in v1.list_node(label_selector="gpuctl.dev/nodegroup=gpu").items},
            "releases": [s.metadata.name for s in v1.list_secret_for_all_namespaces(label_selector="owner=helm").items],
            "namespaces": sorted(n.metadata.name for n in v1.list_namespace().items)}


def refused(env: dict[str, str]) -> str:
    """`create` exits 2 before any write, and `plan` says the same."""
    before = untouched(env)
    proc = run_gpuctl(*CREATE, env=env)
    assert proc.returncode == 2, proc.stderr
    assert proc.stderr.count("error:") == 1
    assert "configure-nodes" not in proc.stderr and "write-gpu-config" not in proc.stderr
    after = untouched(env)
    assert after == before and "gpu-operator" not in after["namespaces"]  # no ConfigMap could have been written
    spec_file = Path(env["KUBECONFIG"]).with_name("refused.yaml")
    spec_file.write_text(run_gpuctl(*CREATE, "--export-spec", env=env).stdout)
    plan = run_gpuctl("plan", "-f", str(spec_file), env=env)
    assert plan.returncode == 2 and plan.stderr == proc.stderr.splitlines(keepends=True)[-1], plan.stderr
    return proc.stderr


def test_eksctl_device_plugin_is_refused_before_any_write(bare: dict[str, str]) -> None:
    _, apps = clients(bare)
    apps.create_namespaced_daemon_set("kube-system", EKSCTL_PLUGIN)
    try:
        stderr = refused(bare)
        assert "eksctl's NVIDIA device plugin runs on this cluster (DaemonSet " \
               "kube-system/nvidia-device-plugin-daemonset); the GPU Operator would add a second one" in stderr
        assert "'eksctl create nodegroup ... --install-nvidia-plugin=false'" in stderr
        assert "'kubectl -n kube-system delete daemonset nvidia-device-plugin-daemonset'" in stderr
    finally:
        apps.delete_namespaced_daemon_set("nvidia-device-plugin-daemonset", "kube-system")


def test_host_device_plugin_is_refused_before_any_write(bare: dict[str, str]) -> None:
    v1, _ = clients(bare)
    gpus = {"status": {"capacity": {"nvidia.com/gpu": "1"}, "allocatable": {"nvidia.com/gpu": "1"}}}
    v1.patch_node_status("gpu-1", gpus)  # what the kubelet shows for Bottlerocket's host plugin
    try:
        stderr = refused(bare)
        assert "node gpu-1 advertises GPUs from a device plugin on the host" in stderr
        assert "--ami-type AL2023_x86_64_NVIDIA" in stderr
    finally:
        v1.patch_node_status("gpu-1", {"status": {"capacity": {"nvidia.com/gpu": None},
                                                  "allocatable": {"nvidia.com/gpu": None}}})


def helm(env: dict[str, str], *args: str) -> str:
    return subprocess.run([str(find_tool("helm")), *args], env=env, check=True, capture_output=True,
                          text=True).stdout


def kubectl_json(env: dict[str, str], *args: str) -> Any:
    return json.loads(subprocess.run([str(find_tool("kubectl")), *args, "-o", "json"], env=env, check=True,
                                     capture_output=True, text=True).stdout)


def wait_for_allocatable(env: dict[str, str], gpus: int, timeout: float = 90) -> None:
    v1, _ = clients(env)
    deadline = time.monotonic() + timeout
    while True:
        got = {n.metadata.name: (n.status.allocatable or {}).get("nvidia.com/gpu")
               for n in v1.list_node(label_selector="gpuctl.dev/nodegroup=gpu").items}
        if set(got.values()) == {str(gpus)}:
            return
        assert time.monotonic() < deadline, got
        time.sleep(1)


def test_magnum_capi_gpu_operator_is_configured_not_doubled(bare: dict[str, str]) -> None:
    # As Magnum's Cluster API driver leaves a workload cluster: a shared NFD release, and NVIDIA's
    # operator as release nvidia-gpu-operator with its own NFD off.
    helm(bare, "install", "node-feature-discovery", str(UPSTREAM / "nfd-v0.19.0" / "node-feature-discovery"),
         "-n", "node-feature-discovery", "--create-namespace", "--wait", "--timeout", "3m")
    helm(bare, "install", "nvidia-gpu-operator", str(UPSTREAM / "gpu-operator-v26.7.0" / "gpu-operator"),
         "-n", "gpu-operator", "--create-namespace", "--set", "nfd.enabled=false",
         "--set", f"devicePlugin.version={OLD_PLUGIN}", "--wait", "--timeout", "3m")
    wait_for_allocatable(bare, 1)  # the operator's plugin serves whole GPUs
    before = kubectl_json(bare, "get", "clusterpolicy", "cluster-policy")["spec"]

    proc = run_gpuctl("-o", "json", *CREATE, env=bare)
    assert proc.returncode == 0, proc.stderr
    assert ("GPU Operator: release nvidia-gpu-operator in gpu-operator (not gpuctl's; sharing configured through "
            "its ClusterPolicy cluster-policy)") in proc.stderr
    steps = {s["step"]: s["outcome"] for s in json.loads(proc.stdout)["steps"]}
    assert "install-gpu-operator" not in steps and "install-nfd" not in steps
    assert (steps["use-existing-nfd"], steps["configure-gpu-operator"], steps["validate/gpu"]) == \
        ("no change", "updated", "passed")

    releases = {(r["name"], r["namespace"]) for r in json.loads(helm(bare, "list", "-A", "-o", "json"))}
    assert releases == {("nvidia-gpu-operator", "gpu-operator"), ("node-feature-discovery", "node-feature-discovery")}
    from tests.support.stack import is_device_plugin

    _, apps = clients(bare)
    sets = apps.list_daemon_set_for_all_namespaces().items
    assert [f"{d.metadata.namespace}/{d.metadata.name}" for d in sets if is_device_plugin(d.metadata.name)] == \
        ["gpu-operator/nvidia-device-plugin-daemonset"]
    assert len([d for d in sets if "node-feature-discovery" in d.metadata.name]) == 1
    policy = kubectl_json(bare, "get", "clusterpolicy", "cluster-policy", "--show-managed-fields")
    spec = policy["spec"]
    assert spec["devicePlugin"]["config"] == {"name": "gpuctl-device-plugin-config", "default": DEFAULT_CONFIG_KEY}
    assert spec["migManager"]["config"]["name"] == "gpuctl-mig-parted-config"
    ours = {"devicePlugin", "migManager", "mig"}
    assert {k: v for k, v in spec.items() if k not in ours} == {k: v for k, v in before.items() if k not in ours}
    assert {k: v for k, v in spec["devicePlugin"].items() if k != "config"} == \
        {k: v for k, v in before["devicePlugin"].items() if k != "config"}
    assert any(m["manager"] == "gpuctl" and m["operation"] == "Apply" for m in policy["metadata"]["managedFields"])

    status = json.loads(run_gpuctl("-o", "json", "status", env=bare).stdout)
    assert {(n["allocatable"]["nvidia.com/gpu"], n["sharing"], n["devicePlugin"]) for n in status["nodes"]} == \
        {(4, "time-slicing", "ready")}
    operator = status["gpuOperator"]  # once, not per node
    assert (operator["release"], operator["namespace"], operator["owner"]) == ("nvidia-gpu-operator", "gpu-operator", "other")
    table = run_gpuctl("status", env=bare)
    assert "GPU Operator: release nvidia-gpu-operator in gpu-operator (not gpuctl's" in table.stdout
    validated = run_gpuctl("validate", env=bare)  # an adopted stack below the security floor is named, not failed
    assert validated.returncode == 0 and "not failing validate: security-floor" in validated.stdout, validated
    doctor = run_gpuctl("-o", "json", "doctor", env=bare)
    assert doctor.returncode == 6, doctor.stderr
    [floor] = [f for f in json.loads(doctor.stdout) if f["check"] == "security-floor"
               and f["evidence"].get("component") == "k8s-device-plugin"]
    assert (floor["evidence"]["version"], floor["evidence"]["fixedVersion"]) == (OLD_PLUGIN.lstrip("v"), "0.17.3"), floor
    assert floor["evidence"]["advisories"] and floor["reference"], floor

    again = run_gpuctl("-o", "json", *CREATE, env=bare)
    assert again.returncode == 0, again.stderr
    result = json.loads(again.stdout)
    assert result["changed"] is False and {s["outcome"] for s in result["steps"]} == {"no change"}
    exported = run_gpuctl(*CREATE, "--export-spec", env=bare).stdout
    spec_file = Path(bare["KUBECONFIG"]).with_name("cluster.yaml")
    spec_file.write_text(exported)
    planned = {p["step"]: p for p in json.loads(run_gpuctl("-o", "json", "plan", "-f", str(spec_file),
                                                           env=bare).stdout)}
    assert planned["configure-gpu-operator"]["action"] == "no change"
    assert "release nvidia-gpu-operator in gpu-operator (not gpuctl's" in planned["configure-gpu-operator"]["detail"]
    assert "install-gpu-operator" not in planned
