"""The GPU stack removed and a node deleted by hand (issue 31), on one sim cluster made from a small spec file with
`apply -f`, through the real CLI and the pinned helm and kubectl:
- `helm uninstall gpu-operator`: the sim's kubelets see their device plugin go and mark its GPUs unhealthy at once
  (allocatable 0, capacity kept: Kubernetes devicemanager PluginDisconnected), so the nodes no longer offer GPUs
  no plugin serves; `kubectl delete node` of one GPU node;
- `doctor` names both (exit 6) with their evidence: the operator release gpuctl recorded and what of it is gone,
  and the node group with fewer nodes than its record;
- the same `apply -f` reinstalls the stack and makes the node again (exit 0; it no longer mistakes the GPUs a
  departed plugin left in capacity for a plugin on the host), `validate` passes and `doctor` finds nothing."""

from __future__ import annotations

import json
import subprocess
from collections.abc import Iterator
from typing import Any

import pytest

from tests.conftest import run_gpuctl
from tests.integration.conftest import SimCluster, await_value, sim_spec
from tests.output_contract import faults, parsed

pytestmark = pytest.mark.integration

NAME = "removed"
GROUP = "{name: gpu, gpu: t4, nodes: 2}"


def gpu_nodes(cluster: SimCluster) -> dict[str, tuple[str | None, str | None]]:
    """GPU node -> its nvidia.com/gpu (capacity, allocatable)."""
    items = json.loads(cluster.tool("kubectl", "get", "nodes", "-l", "gpuctl.dev/nodegroup=gpu", "-o", "json"))
    return {n["metadata"]["name"]: (n["status"].get("capacity", {}).get("nvidia.com/gpu"),
                                    n["status"].get("allocatable", {}).get("nvidia.com/gpu")) for n in items["items"]}


def doctor(cluster: SimCluster) -> tuple[subprocess.CompletedProcess[str], list[dict[str, Any]]]:
    proc = cluster.gpuctl("-o", "json", "doctor")
    data = parsed(proc.stdout, "json")
    assert faults(data) == [], faults(data)
    return proc, data


@pytest.fixture(scope="module")
def cluster(sim_env: dict[str, str], tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[SimCluster, str]]:
    root = tmp_path_factory.mktemp(NAME)
    made = SimCluster(NAME, root / "kubeconfig", dict(sim_env, KUBECONFIG=str(root / "kubeconfig")))
    spec = root / "removed.yaml"
    spec.write_text(sim_spec(NAME, GROUP))
    try:
        proc = made.gpuctl("apply", "-f", str(spec))
        assert proc.returncode == 0, proc.stderr
        yield made, str(spec)
    finally:
        proc = run_gpuctl("cluster", "delete", "--cloud", "sim", "--name", NAME, "--yes", env=made.env)
        assert proc.returncode == 0, proc.stderr


def test_uninstalled_operator_and_deleted_node_are_named_and_the_same_apply_restores_them(
        cluster: tuple[SimCluster, str]) -> None:
    made, spec = cluster
    proc, data = doctor(made)
    assert (proc.returncode, data) == (0, []), proc.stderr
    assert gpu_nodes(made) == {"gpu-0": ("1", "1"), "gpu-1": ("1", "1")}

    made.tool("helm", "uninstall", "gpu-operator", "-n", "gpu-operator", "--wait")
    made.tool("kubectl", "delete", "node", "gpu-1")
    # the kubelet's decision once the plugin pod is gone: every GPU unhealthy, kept in capacity
    await_value("gpu-0 after its device plugin went", lambda: gpu_nodes(made), {"gpu-0": ("1", "0")},
                timeout=90)

    proc, data = doctor(made)
    assert proc.returncode == 6, proc.stderr
    by_check = {f["check"]: f for f in data}
    assert set(by_check) == {"stack-missing", "node-missing"}, data
    stack = by_check["stack-missing"]
    assert stack["object"] == "GPU Operator release gpu-operator in gpu-operator"
    assert stack["evidence"] == {"release": "gpu-operator", "namespace": "gpu-operator", "clusterPolicy": None,
                                 "operatorDeployment": None, "recordedBy": "gpuctl"}
    assert "gpuctl apply -f SPEC" in stack["repair"]
    node = by_check["node-missing"]
    assert node["evidence"] == {"nodegroup": "gpu", "recordedNodes": 2, "nodes": 1, "present": ["gpu-0"]}
    assert proc.stderr.startswith("error: 2 findings: stack-missing on GPU Operator release gpu-operator"), \
        proc.stderr

    proc = made.gpuctl("apply", "-f", spec)  # as doctor says: the same apply that made it
    assert proc.returncode == 0, proc.stderr
    assert "advertises GPUs from a device plugin on the host" not in proc.stderr
    assert gpu_nodes(made) == {"gpu-0": ("1", "1"), "gpu-1": ("1", "1")}
    proc = made.gpuctl("validate")
    assert proc.returncode == 0, proc.stderr
    proc, data = doctor(made)
    assert (proc.returncode, data) == (0, []), proc.stderr
