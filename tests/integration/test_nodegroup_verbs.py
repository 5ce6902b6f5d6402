"""The node-group verbs as a new user meets them on one sim cluster (issue 27): `--label` on `cluster create` and
`nodegroup add` reaches the nodes and the group's record; a re-run of the quick-start create keeps what it does
not name (labels, sharing); `nodegroup add --slices` shares the new group's GPUs; `nodegroup scale --nodes 0`
is taken; and a Karpenter group (Karpenter's real controller beside the sim) is a node group: listed with its
launched node, scaled by its NodePool's limits, deleted with its NodePool, NodeOverlay and NodeClaims."""

from __future__ import annotations

import json
import time
from collections.abc import Callable, Iterator
from typing import Any

import pytest

from tests.conftest import run_gpuctl
from tests.integration.kube_api import core, custom

pytestmark = pytest.mark.integration
CLUSTER = "ngv"
SIM = ("--cloud", "sim")
KARPENTER = "karpenter.sh"
WAIT_S = 90.0
RECORDS = ("gpuctl-node-groups", "gpu-operator")  # the ConfigMap of the groups' records, and its namespace


@pytest.fixture(scope="module")
def env(sim_env: dict[str, str], tmp_path_factory: pytest.TempPathFactory) -> Iterator[dict[str, str]]:
    env = dict(sim_env, KUBECONFIG=str(tmp_path_factory.mktemp("ngv") / "kubeconfig"))
    proc = run_gpuctl("-o", "json", "cluster", "create", *SIM, "--name", CLUSTER, "--gpu", "t4", "--nodes", "1",
                      "--slices", "2", "--label", "team=ml", "--no-validate", env=env)
    assert proc.returncode == 0, proc.stderr
    yield env
    assert run_gpuctl("cluster", "delete", *SIM, "--name", CLUSTER, "--yes", env=env).returncode == 0


def labels(env: dict[str, str], node: str) -> dict[str, str]:
    return core(env).read_node(node).metadata.labels or {}


def record(env: dict[str, str], group: str) -> dict[str, Any]:
    name, namespace = RECORDS
    return json.loads(core(env).read_namespaced_config_map(name, namespace).data[group])


def groups(env: dict[str, str]) -> dict[str, dict[str, Any]]:
    proc = run_gpuctl("-o", "json", "nodegroup", "list", *SIM, "--cluster", CLUSTER, env=env)
    assert proc.returncode == 0, proc.stderr
    return {g["name"]: g for g in json.loads(proc.stdout)}


def gpus(env: dict[str, str], node: str) -> str | None:
    return (core(env).read_node(node).status.allocatable or {}).get("nvidia.com/gpu")


def wait_for(what: str, done: Callable[[], bool], timeout: float = WAIT_S) -> None:
    start = time.monotonic()
    while not done():
        if time.monotonic() - start > timeout:
            raise AssertionError(f"not after {timeout:.0f}s: {what}")
        time.sleep(0.5)


def test_create_label_reaches_the_nodes_and_the_record(env: dict[str, str]) -> None:
    assert labels(env, "gpu-0")["team"] == "ml"
    assert record(env, "gpu")["labels"] == {"team": "ml"}


def test_a_rerun_of_the_quick_start_create_keeps_the_labels_and_sharing_it_does_not_name(env: dict[str, str]) -> None:
    proc = run_gpuctl("-o", "json", "cluster", "create", *SIM, "--name", CLUSTER, "--gpu", "t4", "--nodes", "1",
                      "--no-validate", env=env)
    assert proc.returncode == 0, proc.stderr
    assert record(env, "gpu")["labels"] == {"team": "ml"}
    assert (record(env, "gpu")["sharing"], record(env, "gpu")["replicas"]) == ("time-slicing", 2)
    assert labels(env, "gpu-0")["team"] == "ml"
    assert labels(env, "gpu-0")["nvidia.com/device-plugin.config"] == "slice-2"
    assert gpus(env, "gpu-0") == "2"
    # what it names is its own: --label replaces the group's labels (and the node's)
    proc = run_gpuctl("cluster", "create", *SIM, "--name", CLUSTER, "--gpu", "t4", "--nodes", "1",
                      "--label", "team=cv", "--no-validate", env=env)
    assert proc.returncode == 0, proc.stderr
    assert record(env, "gpu")["labels"] == {"team": "cv"} and labels(env, "gpu-0")["team"] == "cv"
    assert record(env, "gpu")["replicas"] == 2


def test_nodegroup_add_with_slices_and_label_shares_and_labels_the_new_group(env: dict[str, str]) -> None:
    proc = run_gpuctl("nodegroup", "add", *SIM, "--cluster", CLUSTER, "--name", "shared", "--gpu", "t4",
                      "--gpus-per-node", "2", "--nodes", "1", "--slices", "4", "--label", "pool=shared", env=env)
    assert proc.returncode == 0, proc.stderr
    assert "configure-nodes/shared" in proc.stderr and "write-gpu-config" in proc.stderr
    assert gpus(env, "shared-0") == "8"  # 2 GPUs x 4 slices, as `wait-capacity` saw before it returned
    assert labels(env, "shared-0")["pool"] == "shared"
    assert record(env, "shared") | {"taints": None} == {
        "gpu": "t4", "gpusPerNode": 2, "labels": {"pool": "shared"}, "mig": None, "nodes": 1, "replicas": 4,
        "sharing": "time-slicing", "taints": None}
    assert gpus(env, "gpu-0") == "2"  # the other group's sharing is untouched
    # a hostile combination is refused before anything is made
    bad = run_gpuctl("nodegroup", "add", *SIM, "--cluster", CLUSTER, "--name", "bad", "--gpu", "a100-40gb",
                     "--slices", "2", "--mig-layout", "3g.20gb-2x2g.10gb", env=env)
    assert bad.returncode == 2 and "--mig-layout" in bad.stderr.splitlines()[-1], bad.stderr
    assert "bad" not in groups(env)


def test_nodegroup_add_with_a_mig_layout_makes_its_mig_devices(env: dict[str, str]) -> None:
    proc = run_gpuctl("nodegroup", "add", *SIM, "--cluster", CLUSTER, "--name", "mig", "--gpu", "a100-40gb",
                      "--gpus-per-node", "1", "--nodes", "1", "--mig-layout", "3g.20gb-2x2g.10gb", env=env)
    assert proc.returncode == 0, proc.stderr
    node = core(env).read_node("mig-0")
    assert node.metadata.labels["nvidia.com/mig.config"] == "custom-3g.20gb-2x2g.10gb"
    assert node.metadata.labels["nvidia.com/mig.config.state"] == "success"  # the MIG manager's own answer
    assert {k: v for k, v in node.status.allocatable.items() if k.startswith("nvidia.com/mig-")} == {
        "nvidia.com/mig-3g.20gb": "1", "nvidia.com/mig-2g.10gb": "2"}
    assert record(env, "mig")["mig"] == "3g.20gb-2x2g.10gb"
    proc = run_gpuctl("nodegroup", "delete", *SIM, "--cluster", CLUSTER, "--name", "mig", "--yes", env=env)
    assert proc.returncode == 0, proc.stderr


def test_scale_to_0_and_back_keeps_the_group_and_its_sharing(env: dict[str, str]) -> None:
    proc = run_gpuctl("nodegroup", "scale", *SIM, "--cluster", CLUSTER, "--name", "shared", "--nodes", "0",
                      env=env)
    assert proc.returncode == 0, proc.stderr
    assert core(env).list_node(label_selector="gpuctl.dev/nodegroup=shared").items == []
    listed = groups(env)["shared"]
    assert (listed["nodes"], listed["minNodes"], listed["scaling"]) == (0, 0, "cloud")
    assert record(env, "shared")["nodes"] == 0  # what `doctor` holds the group against (node-missing)
    refused = run_gpuctl("nodegroup", "scale", *SIM, "--cluster", CLUSTER, "--name", "shared", "--nodes", "0",
                         "--min-nodes", "1", env=env)
    assert refused.returncode == 2 and "--min-nodes" in refused.stderr, refused.stderr
    proc = run_gpuctl("nodegroup", "scale", *SIM, "--cluster", CLUSTER, "--name", "shared", "--nodes", "1",
                      env=env)
    assert proc.returncode == 0, proc.stderr
    assert gpus(env, "shared-0") == "8" and labels(env, "shared-0")["pool"] == "shared"
    assert record(env, "shared")["nodes"] == 1


# -- a Karpenter group (Karpenter's kwok provider, built on first use) --------------------------------------------


@pytest.fixture(scope="module")
def karpenter(env: dict[str, str]) -> dict[str, str]:
    """The same cluster with a Karpenter group `kp` (0 fixed nodes, up to 2 launched, each GPU in 2 slices)."""
    from tests.support.tools import ensure_tools

    ensure_tools(["karpenter-kwok"], print)  # a first build (minutes) outside create's waits
    proc = run_gpuctl("cluster", "create", *SIM, "--name", CLUSTER, "--gpu", "t4", "--karpenter", "--nodes", "0",
                      "--max-nodes", "2", "--nodegroup-name", "kp", "--slices", "2", "--no-validate", env=env)
    assert proc.returncode == 0, proc.stderr
    env = dict(env, CREATED=proc.stdout)
    return env


def nodepool(env: dict[str, str], kind: str = "nodepools", version: str = "v1") -> dict[str, Any] | None:
    from kubernetes.client.exceptions import ApiException

    try:
        return custom(env).get_cluster_custom_object(KARPENTER, version, kind, "gpuctl-kp")
    except ApiException as exc:
        if exc.status == 404:
            return None
        raise


def claims(env: dict[str, str]) -> list[dict[str, Any]]:
    return custom(env).list_cluster_custom_object(KARPENTER, "v1", "nodeclaims",
                                                  label_selector="karpenter.sh/nodepool=gpuctl-kp")["items"]


def test_the_create_summary_shows_the_karpenter_group(karpenter: dict[str, str]) -> None:
    rows = {line.split()[0]: line.split() for line in karpenter["CREATED"].splitlines()[1:]}
    header = karpenter["CREATED"].splitlines()[0].split()
    kp = dict(zip(header, rows["kp"], strict=True))
    assert (kp["SCALING"], kp["BOUNDS"], kp["READY"]) == ("karpenter", "0..2", "0/0")
    assert {"gpu", "shared"} <= set(rows)


def test_a_karpenter_group_is_listed_with_the_node_it_launched(karpenter: dict[str, str]) -> None:
    env = karpenter
    core(env).create_namespaced_pod("default", {
        "apiVersion": "v1", "kind": "Pod", "metadata": {"name": "kp-0"},
        "spec": {"nodeSelector": {"gpuctl.dev/nodegroup": "kp"},
                 "tolerations": [{"key": "nvidia.com/gpu", "operator": "Exists", "effect": "NoSchedule"}],
                 "containers": [{"name": "c", "image": "busybox", "resources": {"limits": {"nvidia.com/gpu": "1"}}}]}})
    wait_for("the pod running on a launched node",
             lambda: core(env).read_namespaced_pod("kp-0", "default").status.phase == "Running")
    kp = groups(env)["kp"]
    assert {k: kp[k] for k in ("gpu", "scaling", "minNodes", "maxNodes", "nodes", "readyNodes", "launched")} == {
        "gpu": "t4", "scaling": "karpenter", "minNodes": 0, "maxNodes": 2, "nodes": 1, "readyNodes": 1,
        "launched": 1}
    table = run_gpuctl("nodegroup", "list", *SIM, "--cluster", CLUSTER, env=env)
    assert any(line.split()[0] == "kp" and "karpenter" in line.split() for line in table.stdout.splitlines())


def test_scale_sets_the_nodepool_limits(karpenter: dict[str, str]) -> None:
    env = karpenter
    proc = run_gpuctl("nodegroup", "scale", *SIM, "--cluster", CLUSTER, "--name", "kp", "--max-nodes", "3",
                      env=env)
    assert proc.returncode == 0, proc.stderr
    pool = nodepool(env)
    assert pool is not None and pool["spec"]["limits"] == {"nodes": 3, "nvidia.com/gpu": 6}  # 3 nodes x 1 GPU x 2
    assert groups(env)["kp"]["maxNodes"] == 3
    refused = run_gpuctl("nodegroup", "scale", *SIM, "--cluster", CLUSTER, "--name", "kp", "--min-nodes", "1",
                         env=env)
    assert refused.returncode == 2 and "--min-nodes" in refused.stderr, refused.stderr
    help_text = run_gpuctl("nodegroup", "scale", "--help", env=env).stdout
    assert "Karpenter" in help_text


def test_delete_removes_the_nodepool_overlay_and_its_nodeclaims(karpenter: dict[str, str]) -> None:
    env = karpenter
    assert nodepool(env, "nodeoverlays", "v1alpha1") is not None  # a shared group's overlay
    launched = len(claims(env))
    proc = run_gpuctl("nodegroup", "delete", *SIM, "--cluster", CLUSTER, "--name", "kp", "--yes", env=env)
    assert proc.returncode == 0, proc.stderr
    assert f"Karpenter terminated {launched} NodeClaim{'' if launched == 1 else 's'}" in proc.stderr
    assert nodepool(env) is None and nodepool(env, "nodeoverlays", "v1alpha1") is None
    assert claims(env) == []  # the delete waited for Karpenter to terminate them
    assert "kp" not in groups(env)
