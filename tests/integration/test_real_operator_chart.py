"""NVIDIA's own GPU Operator v26.7.0 and NFD 0.19.0 charts (../shared/upstream) on a sim cluster through
`--charts DIR`: the simulated operator acts on the ClusterPolicy the real chart renders, creates the
real operator's DaemonSets (the MPS control daemon and validator included), and its device plugin
loads every config with the real plugin code. Each case must validate; a refused config must not."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.conftest import run_gpuctl

pytestmark = pytest.mark.integration
UPSTREAM = Path(__file__).resolve().parents[2].parent / "shared" / "upstream"
CLUSTER = "realchart"
OPERATOR_DAEMON_SETS = {"nvidia-device-plugin-daemonset", "nvidia-device-plugin-mps-control-daemon",
                        "gpu-feature-discovery", "nvidia-dcgm-exporter", "nvidia-mig-manager",
                        "nvidia-operator-validator"}


@pytest.fixture(scope="module")
def real(sim_env: dict[str, str], tmp_path_factory: pytest.TempPathFactory) -> Iterator[dict[str, str]]:
    """A charts directory of symlinks to the unmodified upstream charts, and a kubeconfig of our own."""
    root = tmp_path_factory.mktemp("realchart")
    charts = root / "charts"
    charts.mkdir()
    (charts / "gpu-operator").symlink_to(UPSTREAM / "gpu-operator-v26.7.0" / "gpu-operator")
    (charts / "node-feature-discovery").symlink_to(UPSTREAM / "nfd-v0.19.0" / "node-feature-discovery")
    env = dict(sim_env, KUBECONFIG=str(root / "kubeconfig"), CHARTS=str(charts))
    yield env
    assert run_gpuctl("cluster", "delete", "--name", CLUSTER, "--yes", env=env).returncode == 0


def create(env: dict[str, str], *flags: str) -> dict:
    proc = run_gpuctl("-o", "json", "cluster", "create", "--cloud", "sim", "--name", CLUSTER, "--charts",
                      env["CHARTS"], "--gpu", "t4", "--nodes", "2", *flags, env=env)
    assert proc.returncode == 0, proc.stderr
    return json.loads(proc.stdout)


def status(env: dict[str, str]) -> dict[str, dict]:
    return {n["node"]: n for n in json.loads(run_gpuctl("-o", "json", "status", env=env).stdout)["nodes"]}


def kubectl_json(env: dict[str, str], *args: str) -> dict:
    import subprocess

    from tests.support.tools import find_tool

    out = subprocess.run([str(find_tool("kubectl")), *args, "-o", "json"], env=env, capture_output=True, text=True,
                         check=True).stdout
    return json.loads(out)


def test_plain_t4_cluster_validates_with_the_real_operator_daemon_sets(real: dict[str, str]) -> None:
    result = create(real)
    assert {c["check"]: c["ok"] for c in result["checks"]}["smoke-test"] is True
    sets = {d["metadata"]["name"]: d for d in kubectl_json(real, "get", "daemonsets", "-n", "gpu-operator")["items"]}
    assert OPERATOR_DAEMON_SETS <= set(sets)
    assert sets["nvidia-device-plugin-daemonset"]["metadata"]["ownerReferences"][0]["kind"] == "ClusterPolicy"
    policy = kubectl_json(real, "get", "clusterpolicy", "cluster-policy")
    assert "config" not in policy["spec"]["devicePlugin"]  # no sharing: the plugin is not pointed at a ConfigMap
    # NVIDIA's hardening against unrequested GPU access, rendered by the real chart into the ClusterPolicy
    assert {"name": "DEVICE_LIST_STRATEGY", "value": "volume-mounts"} in policy["spec"]["devicePlugin"]["env"]
    assert {"name": "ACCEPT_NVIDIA_VISIBLE_DEVICES_ENVVAR_WHEN_UNPRIVILEGED", "value": "false"} in \
        policy["spec"]["toolkit"]["env"]
    assert {n["allocatable"]["nvidia.com/gpu"] for n in status(real).values()} == {1}
    assert run_gpuctl("validate", env=real).returncode == 0


def test_mps_cluster_validates_under_the_single_strategy(real: dict[str, str]) -> None:
    create(real, "--sharing", "mps", "--slices", "4")
    nodes = status(real)
    assert {(n["sharing"], n["allocatable"]["nvidia.com/gpu"], n["devicePlugin"]) for n in nodes.values()} == \
        {("mps", 4, "ready")}
    mps = kubectl_json(real, "get", "daemonset", "-n", "gpu-operator", "nvidia-device-plugin-mps-control-daemon")
    assert mps["status"]["numberReady"] == 2  # the nodes are nvidia.com/mps.capable now
    assert run_gpuctl("validate", env=real).returncode == 0


def test_mps_under_mixed_is_refused_before_any_write(real: dict[str, str]) -> None:
    proc = run_gpuctl("cluster", "create", "--cloud", "sim", "--name", CLUSTER, "--charts", real["CHARTS"], "--gpu",
                      "t4", "--nodes", "2", "--sharing", "mps", "--slices", "4", "--mig-strategy", "mixed", env=real)
    assert proc.returncode == 2
    assert "--mig-strategy: node group 'gpu' uses MPS" in proc.stderr
    assert "ensure-cluster" not in proc.stderr


def test_a_config_the_real_plugin_refuses_fails_validation(real: dict[str, str]) -> None:
    import subprocess
    import time

    from tests.support.tools import find_tool

    create(real, "--slices", "4")
    subprocess.run([str(find_tool("kubectl")), "label", "node", "gpu-0", "--overwrite",
                    "nvidia.com/device-plugin.config=missing"], env=real, check=True, capture_output=True)
    deadline = time.monotonic() + 60
    while "CrashLoopBackOff" not in (status(real)["gpu-0"]["devicePlugin"]) and time.monotonic() < deadline:
        time.sleep(1)
    node = status(real)["gpu-0"]
    assert node["devicePlugin"] == "CrashLoopBackOff: specified config missing does not exist"
    assert node["allocatable"] == {}
    proc = run_gpuctl("-o", "wide", "validate", env=real)  # the whole DETAIL
    assert proc.returncode == 6 and "rollout: 1 of 2 updated pods available" in proc.stdout
    create(real, "--slices", "4")  # converging relabels the node; the plugin pod restarts and serves again
    assert run_gpuctl("validate", env=real).returncode == 0


def test_changed_sharing_validates_on_every_rerun(real: dict[str, str]) -> None:
    """MPS and time-slicing in turn, 4 replicas each: every re-run changes the ClusterPolicy's mig.strategy
    (single for MPS, which the plugin refuses under mixed; mixed for time-slicing) and so the device plugin's
    DaemonSet, which the operator rewrites a moment after the Helm upgrade, while the nodes already advertise
    the 4 the new configuration expects. The capacity wait must see that rollout through, not pass on the plugin
    about to restart (create validates: exit 0)."""
    for run in range(10):
        sharing, strategy = ("mps", "single") if run % 2 == 0 else ("time-slicing", "mixed")
        result = create(real, "--sharing", sharing, "--slices", "4", "--mig-strategy", strategy)
        steps = {s["step"]: s["outcome"] for s in result["steps"]}
        if run:  # (the first run creates the release when this test runs alone)
            assert steps["install-gpu-operator"] == "updated", (run, steps)
        assert {c["check"]: c["ok"] for c in result["checks"]} == \
            {"node-config": True, "capacity": True, "device-plugin": True, "smoke-test": True, "doctor": True}, \
            (run, result)
        policy = kubectl_json(real, "get", "clusterpolicy", "cluster-policy")
        assert policy["spec"]["mig"]["strategy"] == strategy
        plugin = kubectl_json(real, "get", "daemonset", "-n", "gpu-operator", "nvidia-device-plugin-daemonset")
        env = {e["name"]: e.get("value") for c in plugin["spec"]["template"]["spec"]["containers"]
               for e in c.get("env") or []}
        assert env["MIG_STRATEGY"] == strategy, (run, env)  # the rolled-out plugin is the new one
        assert {(n["sharing"], n["allocatable"]["nvidia.com/gpu"], n["devicePlugin"])
                for n in status(real).values()} == {(sharing, 4, "ready")}, run


MIG_ONLY = """
apiVersion: gpuctl.dev/v1alpha1
kind: GpuCluster
metadata: {{name: realmig}}
spec:
  provider: {{cloud: sim}}
  nodeGroups:
    - {{name: train, gpu: a100-40gb, nodes: 1, sharing: {{mig: {{layout: 3g.20gb-2x2g.10gb}}}}}}
  gpuOperator: {{charts: {charts}}}
"""


def test_mig_only_cluster_validates(real: dict[str, str], tmp_path: Path) -> None:
    spec = tmp_path / "mig.yaml"
    spec.write_text(MIG_ONLY.format(charts=real["CHARTS"]))
    try:
        proc = run_gpuctl("-o", "json", "apply", "-f", str(spec), env=real)
        assert proc.returncode == 0, proc.stderr
        steps = {s["step"]: s["outcome"] for s in json.loads(proc.stdout)["steps"]}
        assert steps["validate/train"] == "passed"
        node = status(real)["train-0"]
        assert node["allocatable"] == {"nvidia.com/mig-3g.20gb": 8, "nvidia.com/mig-2g.10gb": 16}
        assert node["devicePlugin"] == "ready"
    finally:
        assert run_gpuctl("cluster", "delete", "--name", "realmig", "--yes", env=real).returncode == 0
