"""Issue 10: the real CLI against real Keystone 30 and Magnum 23 (API and conductor, from PyPI),
whose clusters are sim clusters made by the project's own Magnum driver (tests/beds/openstack/).
Statuses move only through Magnum's conductor (its periodic sync), so every wait here is the
real one: 202 first, the record written by the conductor, *_COMPLETE at a later sync."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path

import pytest
import yaml

from tests.beds.openstack.bed import OpenStackBed
from tests.conftest import run_gpuctl
from tests.integration.conftest import BED_PASSWORD as PASSWORD

WRONG_PASSWORD = "not-the-bed-Pa55word"
CLOUD = ("--cloud", "openstack")
CREATE = ("cluster", "create", *CLOUD, "--name", "os1", "--template", "gpu-template", "--gpu", "t4", "--nodes", "2",
          "--slices", "4", "--charts", "bundled")
NODEGROUP = "magnum.openstack.org/nodegroup"


@pytest.fixture(scope="module")
def os_env(openstack_bed: OpenStackBed, sim_env: dict[str, str],
           tmp_path_factory: pytest.TempPathFactory) -> dict[str, str]:
    root = tmp_path_factory.mktemp("magnum")
    clouds = openstack_bed.write_clouds_yaml(root / "clouds.yaml", {"bed": PASSWORD, "wrong": WRONG_PASSWORD})
    env = {k: v for k, v in sim_env.items() if not k.startswith("OS_")}
    return dict(env, OS_CLIENT_CONFIG_FILE=str(clouds), OS_CLOUD="bed", KUBECONFIG=str(root / "kubeconfig"),
                GPUCTL_SITE_CONFIG=str(root / "no-site.yaml"))


def named(bed: OpenStackBed, name: str) -> list[dict[str, object]]:
    return [c for c in bed.clusters() if c["name"] == name]


@pytest.fixture(scope="module")
def os1(os_env: dict[str, str], openstack_bed: OpenStackBed) -> Iterator[dict[str, object]]:
    """One cluster for the module, created through the CLI; the last test deletes it."""
    proc = run_gpuctl("-o", "json", *CREATE, env=os_env)
    assert proc.returncode == 0, proc.stderr + openstack_bed.log_tail("magnum")
    yield json.loads(proc.stdout)
    if named(openstack_bed, "os1"):
        run_gpuctl("cluster", "delete", *CLOUD, "--name", "os1", "--yes", env=os_env)


def core(env: dict[str, str]):  # noqa: ANN201 - kubernetes.client.CoreV1Api
    from kubernetes import client, config

    return client.CoreV1Api(config.new_client_from_config(env["KUBECONFIG"]))


def group_nodes(env: dict[str, str], group: str) -> dict[str, object]:
    return {n.metadata.name: n for n in core(env).list_node(label_selector=f"{NODEGROUP}={group}").items}


def nodegroup(bed: OpenStackBed, cluster: str, name: str) -> dict[str, object]:
    """In full (Magnum's list shows only a summary: no bounds, labels or taints)."""
    resp = bed.magnum("GET", f"/v1/clusters/{cluster}/nodegroups/{name}")
    assert resp.status_code == 200, resp.text
    return resp.json()


def test_create_runs_the_whole_flow_against_real_magnum(os1: dict[str, object], openstack_bed: OpenStackBed) -> None:
    assert [s["outcome"] for s in os1["steps"]][:3] == ["created", "created", "updated"]  # type: ignore[index]
    assert {c["check"]: c["ok"] for c in os1["checks"]} == {  # type: ignore[union-attr]
        "capacity": True, "device-plugin": True, "smoke-test": True}
    [cluster] = named(openstack_bed, "os1")  # exactly one, however often gpuctl polled a 404 or an old status
    assert cluster["status"] == "UPDATE_COMPLETE" or cluster["status"] == "CREATE_COMPLETE"
    assert cluster["labels"]["nvidia_gpu_enabled"] == "true" and cluster["labels"]["kube_tag"]  # merged
    gpu = nodegroup(openstack_bed, str(cluster["uuid"]), "gpu")
    assert (gpu["flavor_id"], gpu["node_count"], gpu["min_node_count"], gpu["max_node_count"]) == (
        "g2.5xlarge", 2, 2, 2)
    # Magnum speaks 1.14: the node group carries the labels and taints, set on its nodes at registration.
    assert gpu["node_labels"] == {"gpuctl.dev/gpu": "t4", "gpuctl.dev/gpus-per-node": "1"}
    assert gpu["node_taints"] == [{"key": "nvidia.com/gpu", "value": "true", "effect": "NoSchedule"}]


def test_kubeconfig_from_magnums_ca_authenticates(os_env: dict[str, str], os1: dict[str, object]) -> None:
    doc = yaml.safe_load(Path(os_env["KUBECONFIG"]).read_text())
    user = next(u["user"] for u in doc["users"] if u["name"] == "gpuctl-openstack-os1")
    assert set(user) == {"client-certificate-data", "client-key-data"}
    nodes = group_nodes(os_env, "gpu")  # TLS verified against Magnum's CA, client certificate Magnum signed
    assert len(nodes) == 2
    for node in nodes.values():  # node_labels set by Magnum's driver at registration
        assert node.metadata.labels["gpuctl.dev/gpus-per-node"] == "1"


def test_status_shows_four_slices_per_t4(os_env: dict[str, str], os1: dict[str, object]) -> None:
    proc = run_gpuctl("status", "-o", "json", env=os_env)
    assert proc.returncode == 0, proc.stderr
    nodes = json.loads(proc.stdout)
    assert len(nodes) == 2 and {n["nodegroup"] for n in nodes} == {"gpu"}
    for node in nodes:
        assert node["allocatable"] == {"nvidia.com/gpu": 4}
        assert node["taints"] == ["nvidia.com/gpu=true:NoSchedule"]


def test_second_run_changes_nothing(os_env: dict[str, str], openstack_bed: OpenStackBed,
                                    os1: dict[str, object]) -> None:
    [before] = named(openstack_bed, "os1")
    proc = run_gpuctl("-o", "json", *CREATE, env=os_env)
    assert proc.returncode == 0, proc.stderr
    result = json.loads(proc.stdout)
    assert result["changed"] is False and {s["outcome"] for s in result["steps"]} == {"no change"}
    [after] = named(openstack_bed, "os1")
    assert after["updated_at"] == before["updated_at"]


def test_nodegroup_add_scale_delete(os_env: dict[str, str], openstack_bed: OpenStackBed,
                                    os1: dict[str, object]) -> None:
    ng = (*CLOUD, "--cluster", "os1", "--name", "extra")
    proc = run_gpuctl("-o", "json", "nodegroup", "add", *ng, "--gpu", "t4", "--max-nodes", "3", env=os_env)
    assert proc.returncode == 0, proc.stderr
    assert sorted(group_nodes(os_env, "extra")) == ["extra-0"]
    proc = run_gpuctl("-o", "json", "nodegroup", "scale", *ng, "--nodes", "2", env=os_env)
    assert proc.returncode == 0, proc.stderr
    assert json.loads(proc.stdout)[0]["nodes"] == 2 and len(group_nodes(os_env, "extra")) == 2
    uuid = str(named(openstack_bed, "os1")[0]["uuid"])
    assert [g["name"] for g in openstack_bed.nodegroups(uuid)].count("extra") == 1
    proc = run_gpuctl("nodegroup", "delete", *ng, "--yes", env=os_env)
    assert proc.returncode == 0, proc.stderr
    assert group_nodes(os_env, "extra") == {}
    assert "extra" not in [g["name"] for g in openstack_bed.nodegroups(uuid)]


def test_a_node_group_without_maximum_converges(os_env: dict[str, str], openstack_bed: OpenStackBed,
                                                os1: dict[str, object]) -> None:
    """Made outside gpuctl with no max_node_count: lowering its minimum must not send a null maximum."""
    uuid = str(named(openstack_bed, "os1")[0]["uuid"])
    token = openstack_bed.token(openstack_bed.username, openstack_bed.project, PASSWORD)
    resp = openstack_bed.magnum("POST", f"/v1/clusters/{uuid}/nodegroups", token=token, body={
        "name": "free", "flavor_id": "g2.5xlarge", "node_count": 2, "min_node_count": 2})
    assert resp.status_code == 202, resp.text
    ng = (*CLOUD, "--cluster", "os1", "--name", "free")
    proc = run_gpuctl("-o", "json", "nodegroup", "scale", *ng, "--nodes", "1", env=os_env)  # waits for the create
    assert proc.returncode == 0, proc.stderr
    free = nodegroup(openstack_bed, uuid, "free")
    assert (free["node_count"], free["min_node_count"], free["max_node_count"]) == (1, 1, None)
    assert len(group_nodes(os_env, "free")) == 1
    proc = run_gpuctl("nodegroup", "delete", *ng, "--yes", env=os_env)
    assert proc.returncode == 0, proc.stderr


def test_refused_inputs_exit_2_with_magnums_reason(os_env: dict[str, str], openstack_bed: OpenStackBed,
                                                   os1: dict[str, object]) -> None:
    ng = (*CLOUD, "--cluster", "os1", "--name", "odd")
    proc = run_gpuctl("nodegroup", "add", *ng, "--gpu", "t4", "--flavor", "no.such.flavor", env=os_env)
    assert proc.returncode == 2, proc.stderr
    assert "--flavor" in proc.stderr and "no.such.flavor" in proc.stderr
    uuid = str(named(openstack_bed, "os1")[0]["uuid"])
    assert "odd" not in [g["name"] for g in openstack_bed.nodegroups(uuid)]


def test_wrong_credentials_exit_3_without_the_password(os_env: dict[str, str]) -> None:
    proc = run_gpuctl("cluster", "list", *CLOUD, "--os-cloud", "wrong", env=os_env)
    assert proc.returncode == 3, proc.stderr
    assert "HTTP 401" in proc.stderr and "--os-cloud" in proc.stderr
    assert WRONG_PASSWORD not in proc.stdout + proc.stderr


def test_cluster_delete_removes_what_was_made(os_env: dict[str, str], openstack_bed: OpenStackBed,
                                              os1: dict[str, object]) -> None:
    proc = run_gpuctl("cluster", "delete", *CLOUD, "--name", "os1", "--yes", env=os_env)
    assert proc.returncode == 0, proc.stderr
    assert named(openstack_bed, "os1") == []
    doc = yaml.safe_load(Path(os_env["KUBECONFIG"]).read_text())
    assert "gpuctl-openstack-os1" not in [c["name"] for c in doc.get("contexts") or []]
    assert not (Path(os_env["GPUCTL_STATE_DIR"]) / "openstack" / "pending.json").exists()
