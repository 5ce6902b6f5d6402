"""`gpuctl mig apply` on an a100-40gb node group of a sim cluster."""

from __future__ import annotations

import json
from collections.abc import Iterator

import pytest

from tests.conftest import run_gpuctl

pytestmark = pytest.mark.integration


@pytest.fixture(scope="module")
def mig_env(sim_env: dict[str, str], tmp_path_factory: pytest.TempPathFactory) -> Iterator[dict[str, str]]:
    env = dict(sim_env, KUBECONFIG=str(tmp_path_factory.mktemp("mig") / "kubeconfig"))
    # NFD from the operator here (the stack tests cover standalone): one owner either way.
    proc = run_gpuctl("-o", "json", "cluster", "create", "--name", "mig", "--gpu", "a100-40gb", "--nodes", "2",
                      "--nodegroup-name", "a100", "--nfd", "operator", env=env)
    assert proc.returncode == 0, proc.stderr
    assert "install-nfd" not in [s["step"] for s in json.loads(proc.stdout)["steps"]]
    proc = run_gpuctl("nodegroup", "add", "--cluster", "mig", "--name", "t4", "--gpu", "t4", "--taint",
                      "nvidia.com/gpu=true:NoSchedule", "--taint", "pool=t4:NoExecute", env=env)
    assert proc.returncode == 0, proc.stderr
    yield env
    assert run_gpuctl("cluster", "delete", "--name", "mig", "--yes", env=env).returncode == 0


def test_operator_owns_nfd(mig_env: dict[str, str]) -> None:
    from kubernetes import client, config

    apps = client.AppsV1Api(config.new_client_from_config(mig_env["KUBECONFIG"]))
    nfd = [d.metadata.name for d in apps.list_daemon_set_for_all_namespaces().items if "feature-discovery" in d.metadata.name
           and d.metadata.name != "gpu-feature-discovery"]
    assert nfd == ["gpu-operator-node-feature-discovery-worker"]


def test_nodegroup_add_registers_nodes_with_its_taints(mig_env: dict[str, str]) -> None:
    from kubernetes import client, config

    v1 = client.CoreV1Api(config.new_client_from_config(mig_env["KUBECONFIG"]))
    taints = [(t.key, t.value, t.effect) for t in v1.read_node("t4-0").spec.taints or []]
    assert taints == [("nvidia.com/gpu", "true", "NoSchedule"), ("pool", "t4", "NoExecute")]


def node_labels(env: dict[str, str]) -> dict[str, dict[str, str]]:
    from kubernetes import client, config

    v1 = client.CoreV1Api(config.new_client_from_config(env["KUBECONFIG"]))
    return {n.metadata.name: n.metadata.labels for n in v1.list_node().items}


def test_mig_apply_reaches_success_with_mig_resources(mig_env: dict[str, str]) -> None:
    proc = run_gpuctl("-o", "json", "mig", "apply", "3g.20gb-2x2g.10gb", "--nodegroup", "a100", env=mig_env)
    assert proc.returncode == 0, proc.stderr
    result = json.loads(proc.stdout)
    assert [s["step"] for s in result["steps"]] == ["write-mig-config", "label-nodes", "wait-mig-manager",
                                                    "verify-allocatable"]
    status = json.loads(run_gpuctl("status", "--nodegroup", "a100", "-o", "json", env=mig_env).stdout)
    for node in status:
        assert node["mig_state"] == "success"
        assert node["mig_config"] == "custom-3g.20gb-2x2g.10gb"
        per_gpu = {k: v // node["gpus"] for k, v in node["allocatable"].items()}
        assert per_gpu == {"nvidia.com/mig-3g.20gb": 1, "nvidia.com/mig-2g.10gb": 2}
    again = json.loads(run_gpuctl("-o", "json", "mig", "apply", "3g.20gb-2x2g.10gb", "--nodegroup", "a100",
                                  env=mig_env).stdout)
    assert {s["step"]: s["outcome"] for s in again["steps"]}["label-nodes"] == "no change"
    validated = run_gpuctl("validate", "--nodegroup", "a100", env=mig_env)
    assert validated.returncode == 0, validated.stderr
    assert "nvidia.com/mig-" in validated.stdout


@pytest.mark.parametrize("args,message", [
    (["3g.20gb-3g.20gb-1g.5gb", "--nodegroup", "a100"], "no free memory slot for 1g.5gb"),
    (["4x2g.10gb", "--nodegroup", "a100"], "at most 3 x 2g.10gb"),
    (["2g.20gb", "--nodegroup", "a100"], "unknown profile '2g.20gb' for a100-40gb"),
    (["all-balanced", "--nodegroup", "t4"], "t4 does not support MIG"),
    (["3g.20gb-2x2g.10gb", "--nodegroup", "a100", "--strategy", "single"], "single needs one profile per GPU"),
    (["2g.20gb"], "LAYOUT: no node group takes '2g.20gb': 'a100' (a100-40gb, 2 nodes): unknown profile"),
])
def test_invalid_layouts_are_rejected_before_any_write(mig_env: dict[str, str], args: list[str], message: str) -> None:
    before = node_labels(mig_env)
    proc = run_gpuctl("mig", "apply", *args, env=mig_env)
    assert proc.returncode == 2, proc.stderr
    assert message in proc.stderr and proc.stderr.count("\n") == 1
    assert node_labels(mig_env) == before


def test_mig_validate_and_plan_commands() -> None:
    ok = run_gpuctl("mig", "validate", "3g.20gb-2x2g.10gb", "--gpu", "a100-40gb")
    assert ok.returncode == 0
    bad = run_gpuctl("mig", "validate", "3g.20gb-3g.20gb-1g.5gb", "--gpu", "a100-40gb")
    assert bad.returncode == 2 and "no free memory slot for 1g.5gb" in bad.stderr
    plan = run_gpuctl("mig", "plan", "3g.20gb-2x2g.10gb", "--gpu", "a100-40gb", "-o", "json")
    rows = json.loads(plan.stdout)["instances"]
    assert [(r["profile"], r["start"]) for r in rows] == [("2g.10gb", 0), ("2g.10gb", 2), ("3g.20gb", 4)]
