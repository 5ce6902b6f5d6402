"""Issue 3's full flow on a sim cluster: NFD + GPU Operator, taints, time-slicing, validation."""

from __future__ import annotations

import json
import shutil
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.conftest import run_gpuctl
from tests.integration.conftest import await_value
from tests.integration.kube_api import core
from tests.support.stack import is_device_plugin
from tests.support.util import data_dir

pytestmark = pytest.mark.integration

CREATE = ("cluster", "create", "--cloud", "sim", "--name", "stack", "--gpu", "t4", "--nodes", "2", "--slices", "4")


@pytest.fixture(scope="module")
def stack(sim_env: dict[str, str], tmp_path_factory: pytest.TempPathFactory) -> Iterator[dict[str, str]]:
    kubeconfig = tmp_path_factory.mktemp("stack") / "kubeconfig"
    env = dict(sim_env, KUBECONFIG=str(kubeconfig))
    proc = run_gpuctl("-o", "json", *CREATE, env=env)
    assert proc.returncode == 0, proc.stderr
    env["FIRST_RUN"] = proc.stdout
    yield env
    assert run_gpuctl("cluster", "delete", "--name", "stack", "--yes", env=env).returncode == 0


def test_full_flow_steps_and_capacity(stack: dict[str, str]) -> None:
    result = json.loads(stack["FIRST_RUN"])
    steps = [s["step"] for s in result["steps"]]
    assert steps == ["ensure-cluster", "ensure-nodegroup/gpu", "write-kubeconfig", "write-gpu-config",
                     "configure-nodes/gpu", "install-nfd", "install-gpu-operator", "restart-device-plugin",
                     "wait-capacity/gpu", "validate/gpu"]
    assert {c["check"]: c["ok"] for c in result["checks"]} == {"node-config": True, "capacity": True,
                                                               "device-plugin": True, "smoke-test": True,
                                                               "doctor": True}
    proc = run_gpuctl("status", "-o", "json", env=stack)
    assert proc.returncode == 0, proc.stderr
    nodes = json.loads(proc.stdout)["nodes"]
    assert [n["node"] for n in nodes] == ["gpu-0", "gpu-1"]
    for node in nodes:
        assert node["allocatable"] == {"nvidia.com/gpu": 4 * node["gpus"]}
        assert (node["sharing"], node["replicas"], node["product"]) == ("time-slicing", 4, "Tesla-T4-SHARED")
        assert node["taints"] == ["nvidia.com/gpu=true:NoSchedule"]


def test_second_run_changes_nothing(stack: dict[str, str]) -> None:
    proc = run_gpuctl("-o", "json", *CREATE, env=stack)
    assert proc.returncode == 0, proc.stderr
    result = json.loads(proc.stdout)
    assert result["changed"] is False
    outcomes = {s["step"]: s["outcome"] for s in result["steps"]}
    assert set(outcomes.values()) == {"no change"}  # no smoke test either on a converged cluster
    assert [c["check"] for c in result["checks"]] == ["capacity"] and result["checks"][0]["ok"]


def test_one_device_plugin_and_tolerations_everywhere(stack: dict[str, str]) -> None:
    from kubernetes import client, config

    apps = client.AppsV1Api(config.new_client_from_config(stack["KUBECONFIG"]))
    sets = apps.list_daemon_set_for_all_namespaces().items
    # The operator always creates the MPS control daemon beside the plugin; it is not a second plugin.
    assert sorted(d.metadata.name for d in sets if "device-plugin" in d.metadata.name) == [
        "nvidia-device-plugin-daemonset", "nvidia-device-plugin-mps-control-daemon"]
    assert [d.metadata.name for d in sets if is_device_plugin(d.metadata.name)] == ["nvidia-device-plugin-daemonset"]
    # NFD is standalone: the operator's own NFD is off (one owner per component).
    assert not [d for d in sets if d.metadata.name.startswith("gpu-operator-node-feature-discovery")]
    operands = [ds for ds in sets if ds.metadata.namespace == "gpu-operator"]
    assert "nvidia-device-plugin-daemonset" in {ds.metadata.name for ds in operands}
    for ds in operands:
        tolerations = ds.spec.template.spec.tolerations or []
        assert any(t.key == "nvidia.com/gpu" and t.effect == "NoSchedule" for t in tolerations), ds.metadata.name
    pods = core(stack).list_namespaced_pod("gpu-operator", label_selector="app=nvidia-device-plugin-daemonset").items
    assert sorted(p.spec.node_name for p in pods) == ["gpu-0", "gpu-1"]


def test_failing_smoke_test_exits_6_with_diagnostics(stack: dict[str, str]) -> None:
    proc = run_gpuctl("validate", "--image", "nvcr.io/nvidia/k8s/cuda-sample:vectoradd-cuda13.0.0", "-o", "json",
                      env=stack)
    assert proc.returncode == 6, proc.stderr
    checks = {c["check"]: c for c in json.loads(proc.stdout)}
    assert checks["capacity"]["ok"] and checks["device-plugin"]["ok"]
    assert not checks["smoke-test"]["ok"]
    assert "CUDA driver version is insufficient" in checks["smoke-test"]["detail"]
    assert "exit 1" in checks["smoke-test"]["detail"]
    assert proc.stderr.startswith("error: 1 of 5 checks failed: smoke-test")
    passing = run_gpuctl("-o", "wide", "validate", "--nodegroup", "gpu", env=stack)
    assert passing.returncode == 0, passing.stderr
    assert "CUDA vectoradd passed" in passing.stdout


def test_validate_on_a_group_whose_gpus_are_all_requested_says_so_and_the_fix(stack: dict[str, str]) -> None:
    v1 = core(stack)
    holders = [f"holder-{i}" for i in range(8)]  # 2 nodes x 4 time-slicing replicas
    for name in holders:
        v1.create_namespaced_pod("default", {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": name}, "spec": {
            "terminationGracePeriodSeconds": 0, "containers": [
                {"name": "c", "image": "busybox", "resources": {"limits": {"nvidia.com/gpu": "1"}}}],
            "tolerations": [{"key": "nvidia.com/gpu", "operator": "Exists", "effect": "NoSchedule"}]}})
    try:
        def bound() -> bool:
            return all(v1.read_namespaced_pod(n, "default").spec.node_name for n in holders)

        await_value("the holders bound", bound, True)
        proc = run_gpuctl("validate", "--nodegroup", "gpu", "--timeout", "4", env=stack)
        assert proc.returncode == 6, proc.stderr
        [message] = [line for line in proc.stderr.splitlines() if line.startswith("error:")]
        assert "still Pending unscheduled after 4s" in message, message
        assert "no free nvidia.com/gpu on the node group (8 of 8 requested by running pods" in message, message
        assert "Insufficient nvidia.com/gpu" in message  # the scheduler's own words
        assert "'gpuctl nodegroup scale'" in message  # the fix
    finally:
        for name in holders:
            v1.delete_namespaced_pod(name, "default", grace_period_seconds=0)


def test_edited_config_needs_a_device_plugin_restart(stack: dict[str, str]) -> None:
    from tests.integration.operator_pass import operator_pass
    from tests.support.sim import LOADED

    v1 = core(stack)
    loaded = json.loads(v1.read_node("gpu-0").metadata.annotations[LOADED])
    assert loaded["replicas"] == 4 and not loaded["error"], loaded
    cm = v1.read_namespaced_config_map("gpuctl-device-plugin-config", "gpu-operator")
    edited = cm.data["slice-4"].replace("replicas: 4", "replicas: 2")
    v1.patch_namespaced_config_map("gpuctl-device-plugin-config", "gpu-operator", {"data": {"slice-4": edited}},
                                   _content_type="application/merge-patch+json")
    # The device plugin does not reload an edited config (upstream behaviour): after a pass of the operator that
    # read the edited ConfigMap, the node's plugin still holds what its pod loaded when it started.
    node = operator_pass(v1, "gpu-0")
    assert json.loads(node.metadata.annotations[LOADED]) == loaded
    assert node.status.allocatable["nvidia.com/gpu"] == "4"
    before = {p.metadata.uid for p in v1.list_namespaced_pod(
        "gpu-operator", label_selector="app=nvidia-device-plugin-daemonset").items}

    proc = run_gpuctl("-o", "json", *CREATE, env=stack)
    assert proc.returncode == 0, proc.stderr
    outcomes = {s["step"]: s["outcome"] for s in json.loads(proc.stdout)["steps"]}
    assert outcomes["write-gpu-config"] == "updated"
    assert outcomes["restart-device-plugin"] == "updated"
    after = {p.metadata.uid for p in v1.list_namespaced_pod(
        "gpu-operator", label_selector="app=nvidia-device-plugin-daemonset").items}
    assert before.isdisjoint(after)
    assert v1.read_node("gpu-0").status.allocatable["nvidia.com/gpu"] == "4"


def test_failed_helm_upgrade_rolls_back_and_exits_5(stack: dict[str, str], tmp_path: Path) -> None:
    charts = tmp_path / "charts"
    shutil.copytree(data_dir("templates") / "charts", charts)
    broken = charts / "gpu-operator" / "templates" / "broken.yaml"
    broken.write_text("apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: Not_A_Valid_Name\n")
    chart_yaml = charts / "gpu-operator" / "Chart.yaml"
    chart_yaml.write_text(chart_yaml.read_text().replace("version: v26.7.0-sim", "version: v26.7.1-sim"))
    proc = run_gpuctl(*CREATE, "--charts", str(charts), env=stack)
    assert proc.returncode == 5, proc.stderr
    assert "helm upgrade of gpu-operator failed and was rolled back" in proc.stderr
    assert "Not_A_Valid_Name" in proc.stderr and proc.stderr.count("error:") == 1
    history = run_gpuctl("-o", "json", *CREATE, env=stack)  # the bundled chart again: converges back
    assert history.returncode == 0, history.stderr


def test_bad_stack_inputs_exit_2_before_any_write(stack: dict[str, str]) -> None:
    v1 = core(stack)
    before = v1.read_node("gpu-0").metadata.resource_version
    for extra, message in [(("--taint", "nvidia.com/gpu=true:NoScheduleX"), "--taint: "),
                           (("--sharing", "magic"), "--sharing: unknown strategy 'magic'"),
                           (("--slices", "1"), "--slices: must be between 2 and 64"),
                           (("--nfd", "both"), "--nfd: unknown owner 'both'"),
                           (("--charts", "/nonexistent"), "--charts: no gpu-operator chart in '/nonexistent'")]:
        proc = run_gpuctl(*CREATE, *extra, env=stack)
        assert proc.returncode == 2 and message in proc.stderr, (extra, proc.stderr)
    assert v1.read_node("gpu-0").metadata.resource_version == before


def test_a_foreign_device_plugin_is_never_doubled(stack: dict[str, str]) -> None:
    from kubernetes import client, config

    apps = client.AppsV1Api(config.new_client_from_config(stack["KUBECONFIG"]))
    foreign = {"apiVersion": "apps/v1", "kind": "DaemonSet",
               "metadata": {"name": "nvidia-device-plugin-daemonset", "namespace": "kube-system"},
               "spec": {"selector": {"matchLabels": {"app": "foreign-plugin"}},
                        "template": {"metadata": {"labels": {"app": "foreign-plugin"}},
                                     "spec": {"containers": [{"name": "p", "image": "example/plugin:1"}]}}}}
    apps.create_namespaced_daemon_set("kube-system", foreign)
    try:
        proc = run_gpuctl(*CREATE, env=stack)
        assert proc.returncode == 2, proc.stderr  # refused before any write: the user's cluster to change
        assert "device plugin runs on this cluster (DaemonSet kube-system/nvidia-device-plugin-daemonset)" in proc.stderr
        validated = run_gpuctl("-o", "wide", "validate", env=stack)
        assert validated.returncode == 6 and "found 2" in validated.stdout
    finally:
        apps.delete_namespaced_daemon_set("nvidia-device-plugin-daemonset", "kube-system")
