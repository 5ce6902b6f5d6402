"""`gpuctl mig apply` on an a100-40gb node group of a sim cluster."""

from __future__ import annotations

import json
import subprocess
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from tests.conftest import run_gpuctl
from tests.output_contract import faults

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
    assert not faults(result), faults(result)  # the output contract (docs/reference.md)
    assert [s["step"] for s in result["steps"]] == ["write-mig-config", "label-nodes", "wait-mig-manager",
                                                    "verify-allocatable"]
    listed = run_gpuctl("status", "--nodegroup", "a100", "-o", "json", env=mig_env)
    assert listed.returncode == 0, listed.stderr
    status = json.loads(listed.stdout)["nodes"]
    assert sorted(node["node"] for node in status) == ["a100-0", "a100-1"]
    for node in status:
        assert node["migState"] == "success"
        assert node["migConfig"] == "custom-3g.20gb-2x2g.10gb"
        per_gpu = {k: v // node["gpus"] for k, v in node["allocatable"].items()}
        assert per_gpu == {"nvidia.com/mig-3g.20gb": 1, "nvidia.com/mig-2g.10gb": 2}
    again = json.loads(run_gpuctl("-o", "json", "mig", "apply", "3g.20gb-2x2g.10gb", "--nodegroup", "a100",
                                  env=mig_env).stdout)
    assert {s["step"]: s["outcome"] for s in again["steps"]}["label-nodes"] == "no change"
    validated = run_gpuctl("-o", "wide", "validate", "--nodegroup", "a100", env=mig_env)
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


def wait_until(what: str, done: Callable[[], bool], timeout: float = 30) -> None:
    deadline = time.monotonic() + timeout
    while not done():
        assert time.monotonic() < deadline, f"not after {timeout:.0f}s: {what}"
        time.sleep(0.2)


# Configs the sim's MIG manager is given beside gpuctl's own, written into the MIG ConfigMap as another tool
# could: gpuctl refuses each layout before any write, so only the MIG manager decides them.
UNCHECKED = {
    "crowded": {"3g.20gb": 2, "1g.5gb": 1},  # no memory slot left for the 1g.5gb
    "four-2g": {"2g.10gb": 4},
    "no-such-profile": {"2g.20gb": 1},  # not an A100-40GB profile
}


def test_the_sim_mig_manager_answers_as_mig_parted_does(mig_env: dict[str, str], tmp_path: Path) -> None:
    """Each config on node a100-0: the state the sim's MIG manager sets and the MIG resources it advertises
    are what mig-parted's own apply (upstreamcheck mig-apply, go-nvml's mock A100-40GB) gives for that
    ConfigMap, config and node: success or failure, and on success the instances it made on each GPU."""
    import yaml
    from kubernetes import client, config

    from tests.support.kube import MERGE_PATCH
    from tests.support.model import labels as L
    from tests.support.tools import find_tool

    tool = find_tool("upstreamcheck")
    assert tool is not None  # a sim cluster runs, so `gpuctl sim install` has put it in the cache
    v1 = client.CoreV1Api(config.new_client_from_config(mig_env["KUBECONFIG"]))
    [policy] = client.CustomObjectsApi(v1.api_client).list_cluster_custom_object(
        "nvidia.com", "v1", "clusterpolicies")["items"]
    cm_name = policy["spec"]["migManager"]["config"]["name"]
    [cm] = [c for c in v1.list_config_map_for_all_namespaces(field_selector=f"metadata.name={cm_name}").items]
    doc = yaml.safe_load(cm.data["config.yaml"])
    doc["mig-configs"].update({name: [{"devices": "all", "mig-enabled": True, "mig-devices": devices}]
                               for name, devices in UNCHECKED.items()})
    text = yaml.safe_dump(doc)
    v1.patch_namespaced_config_map(cm_name, cm.metadata.namespace, {"data": {"config.yaml": text}})
    (tmp_path / "config.yaml").write_text(text)
    node = v1.read_node("a100-0")
    gpus = int(node.metadata.labels[L.GPU_COUNT])
    before = node.metadata.labels[L.MIG_CONFIG]
    answers = {}
    try:
        for name in [*UNCHECKED, "all-balanced", "custom-3g.20gb-2x2g.10gb"]:
            if name not in doc["mig-configs"]:
                continue
            upstream = subprocess.run([str(tool), "mig-apply", "--file", str(tmp_path / "config.yaml"), "--config",
                                       name, "--gpu", "a100-40gb", "--gpus", str(gpus)],
                                      capture_output=True, text=True, timeout=60)
            want_state = "success" if upstream.returncode == 0 else "failed"
            v1.patch_node("a100-0", {"metadata": {"labels": {L.MIG_CONFIG: name, L.MIG_STATE: None}}},
                          _content_type=MERGE_PATCH)
            wait_until(f"the MIG manager's answer to {name}", lambda: (v1.read_node("a100-0").metadata.labels
                                                                         or {}).get(L.MIG_STATE) in ("success", "failed"))
            labels = v1.read_node("a100-0").metadata.labels
            answers[name] = (labels[L.MIG_STATE], want_state)
            assert labels[L.MIG_STATE] == want_state, (name, upstream.stderr)
            if want_state == "failed":
                continue
            want: dict[str, int] = {"nvidia.com/gpu": 0}
            for applied in json.loads(upstream.stdout)["gpus"]:
                for profile, count in applied["mig-devices"].items():
                    want[f"nvidia.com/mig-{profile}"] = want.get(f"nvidia.com/mig-{profile}", 0) + count

            def advertised() -> dict[str, int]:
                allocatable = v1.read_node("a100-0").status.allocatable or {}
                return {k: int(v) for k, v in allocatable.items() if k.startswith("nvidia.com/")}

            wait_until(f"the resources of {name}", lambda: advertised() == want)  # noqa: B023
            assert advertised() == want, name
    finally:
        v1.patch_node("a100-0", {"metadata": {"labels": {L.MIG_CONFIG: before, L.MIG_STATE: None}}},
                      _content_type=MERGE_PATCH)
    # both answers occur: the loop checked a refusal and an apply (a pattern gone stale cannot pass it)
    assert {want for _, want in answers.values()} == {"success", "failed"}, answers
