"""`gpuctl mig apply LAYOUT` with neither --nodegroup nor --selector, on sim clusters: applied to the one node group
whose GPUs take the layout (named on stderr); refused (exit 2, nothing written) naming the groups where two take it,
and saying why where none does."""

from __future__ import annotations

import json
from collections.abc import Iterator

import pytest

from tests.conftest import run_gpuctl

pytestmark = pytest.mark.integration
LAYOUT = "3g.20gb-2x2g.10gb"


def node_labels(env: dict[str, str]) -> dict[str, dict[str, str]]:
    from kubernetes import client, config

    v1 = client.CoreV1Api(config.new_client_from_config(env["KUBECONFIG"]))
    return {n.metadata.name: n.metadata.labels for n in v1.list_node().items}


def create(env: dict[str, str], name: str, gpu: str) -> None:
    proc = run_gpuctl("cluster", "create", "--cloud", "sim", "--name", name, "--gpu", gpu, "--nodes", "1",
                      "--no-validate", env=env)
    assert proc.returncode == 0, proc.stderr


def delete(env: dict[str, str], name: str) -> None:
    proc = run_gpuctl("cluster", "delete", "--cloud", "sim", "--name", name, "--yes", env=env)
    assert proc.returncode == 0, proc.stderr


# First in the module: its cluster is made and gone before the module's A100 cluster is made.
def test_a_t4_only_cluster_is_told_why_no_group_takes_the_layout(sim_env: dict[str, str],
                                                                 tmp_path_factory: pytest.TempPathFactory) -> None:
    env = dict(sim_env, KUBECONFIG=str(tmp_path_factory.mktemp("t4only") / "kubeconfig"))
    create(env, "t4only", "t4")
    try:
        before = node_labels(env)
        proc = run_gpuctl("mig", "apply", LAYOUT, env=env)
        assert proc.returncode == 2, proc.stderr
        assert proc.stderr.splitlines() == [
            f"error: LAYOUT: no node group takes '{LAYOUT}': 'gpu' (t4, 1 node): t4 does not support MIG; choose a "
            "layout one of them takes ('gpuctl mig validate LAYOUT --gpu GPU'), or add a node group of MIG GPUs "
            "('gpuctl nodegroup add')"]
        assert node_labels(env) == before
    finally:
        delete(env, "t4only")


@pytest.fixture(scope="module")
def a100_env(sim_env: dict[str, str], tmp_path_factory: pytest.TempPathFactory) -> Iterator[dict[str, str]]:
    """A sim cluster of one A100 node group, `gpu` (the quick start's with --gpu a100-40gb)."""
    env = dict(sim_env, KUBECONFIG=str(tmp_path_factory.mktemp("migtarget") / "kubeconfig"))
    create(env, "migtarget", "a100-40gb")
    yield env
    delete(env, "migtarget")


def test_the_one_a100_group_takes_the_layout_and_is_named(a100_env: dict[str, str]) -> None:
    proc = run_gpuctl("-o", "json", "mig", "apply", LAYOUT, env=a100_env)
    assert proc.returncode == 0, proc.stderr
    assert "mig apply: node group 'gpu' (a100-40gb, 1 node)" in proc.stderr.splitlines()
    assert [row["node"] for row in json.loads(proc.stdout)["nodes"]] == ["gpu-0"]
    [status] = json.loads(run_gpuctl("-o", "json", "status", "--nodegroup", "gpu", env=a100_env).stdout)["nodes"]
    assert (status["migConfig"], status["migState"]) == (f"custom-{LAYOUT}", "success")
    assert status["allocatable"] == {"nvidia.com/mig-3g.20gb": 8, "nvidia.com/mig-2g.10gb": 16}


def test_a_second_a100_group_makes_it_ask_for_nodegroup_naming_both(a100_env: dict[str, str]) -> None:
    proc = run_gpuctl("nodegroup", "add", "--cluster", "migtarget", "--name", "more", "--gpu", "A100-40GB",
                      env=a100_env)
    assert proc.returncode == 0, proc.stderr
    try:
        before = node_labels(a100_env)
        proc = run_gpuctl("mig", "apply", LAYOUT, env=a100_env)
        assert proc.returncode == 2, proc.stderr
        assert proc.stderr.splitlines() == [
            f"error: --nodegroup: layout '{LAYOUT}' fits 2 node groups: 'gpu' (a100-40gb, 1 node), 'more' "
            "(a100-40gb, 1 node); pass --nodegroup NAME to choose one"]
        assert node_labels(a100_env) == before
    finally:
        proc = run_gpuctl("nodegroup", "delete", "--cluster", "migtarget", "--name", "more", "--yes", env=a100_env)
        assert proc.returncode == 0, proc.stderr
