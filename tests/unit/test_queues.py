"""Kueue objects of a tenant, from the cluster's GPU nodes (the real CRDs check them in
tests/integration/test_tenant_queues.py)."""

from __future__ import annotations

from typing import Any

from gpuctl.kube.kube_object import KubeObject
from gpuctl.model.tenant import make_tenant
from gpuctl.ops.tenancy.queues import flavors_of, queue_manifests, resource_groups


def node(name: str, labels: dict[str, str], allocatable: dict[str, str],
         taints: list[dict[str, Any]] | None = None) -> KubeObject:
    """A Node as the API server sends it (JSON)."""
    return KubeObject({"apiVersion": "v1", "kind": "Node", "metadata": {"name": name, "labels": labels},
                       "spec": {"taints": taints} if taints else {}, "status": {"allocatable": allocatable}})


GPU_TAINT = {"key": "nvidia.com/gpu", "value": "true", "effect": "NoSchedule"}
T4 = {"gpuctl.dev/gpu": "t4", "nvidia.com/device-plugin.config": "time-slicing-4"}
A100_MIG = {"gpuctl.dev/gpu": "a100-40gb", "nvidia.com/mig.config": "gpuctl-3g.20gb-2x2g.10gb"}
NODES = [
    node("t4-0", T4, {"nvidia.com/gpu": "4"}, [GPU_TAINT]),
    node("t4-1", T4, {"nvidia.com/gpu": "4"}, [GPU_TAINT, {"key": "only", "value": "t4-1", "effect": "NoSchedule"}]),
    node("a100-0", A100_MIG, {"nvidia.com/gpu": "0", "nvidia.com/mig-3g.20gb": "8", "nvidia.com/mig-2g.10gb": "16"},
         [GPU_TAINT]),
    node("cpu-0", {}, {"cpu": "8"}),
]


def test_one_flavor_per_model_and_sharing_mode_with_the_taints_all_its_nodes_carry() -> None:
    flavors = {f.name: f for f in flavors_of(NODES)}
    assert sorted(flavors) == ["gpuctl-a100-40gb-gpuctl-3g.20gb-2x2g.10gb", "gpuctl-t4-time-slicing-4"]
    t4 = flavors["gpuctl-t4-time-slicing-4"]
    assert t4.node_labels == T4 and t4.resources == ("nvidia.com/gpu",)
    assert t4.tolerations == ({"key": "nvidia.com/gpu", "operator": "Equal", "value": "true", "effect": "NoSchedule"},)
    assert flavors["gpuctl-a100-40gb-gpuctl-3g.20gb-2x2g.10gb"].resources == (
        "nvidia.com/mig-2g.10gb", "nvidia.com/mig-3g.20gb")


def test_each_resource_in_one_group_every_flavor_lists_all_covered_resources() -> None:
    team = make_tenant("team-a", 2, {"3g.20gb": 1, "2g.10gb": 3}, None, False, "tenant", borrow=1, lend=2)
    groups = resource_groups(team, flavors_of(NODES))
    assert [g["coveredResources"] for g in groups] == [["nvidia.com/gpu"],
                                                         ["nvidia.com/mig-2g.10gb", "nvidia.com/mig-3g.20gb"]]
    [mig] = groups[1]["flavors"]
    assert mig["resources"] == [
        {"name": "nvidia.com/mig-2g.10gb", "nominalQuota": "3", "borrowingLimit": "1", "lendingLimit": "2"},
        {"name": "nvidia.com/mig-3g.20gb", "nominalQuota": "1", "borrowingLimit": "1", "lendingLimit": "1"}]  # <= nominal
    [gpu] = groups[0]["flavors"]
    assert gpu == {"name": "gpuctl-t4-time-slicing-4", "resources": [
        {"name": "nvidia.com/gpu", "nominalQuota": "2", "borrowingLimit": "1", "lendingLimit": "2"}]}


def test_a_flavor_offering_two_resources_joins_their_groups() -> None:
    mixed = node("a100-1", {"gpuctl.dev/gpu": "a100-40gb"}, {"nvidia.com/gpu": "4", "nvidia.com/mig-3g.20gb": "2"})
    team = make_tenant("team-a", 2, {"3g.20gb": 1}, None, False, "tenant")
    groups = resource_groups(team, flavors_of([*NODES, mixed]))
    assert [g["coveredResources"] for g in groups] == [["nvidia.com/gpu", "nvidia.com/mig-3g.20gb"]]
    by_name = {f["name"]: f["resources"] for f in groups[0]["flavors"]}
    assert by_name["gpuctl-t4-time-slicing-4"][1] == {"name": "nvidia.com/mig-3g.20gb", "nominalQuota": "0",
                                                       "borrowingLimit": "0"}  # listed, as Kueue wants, but none
    assert {f["name"] for f in groups[0]["flavors"]} == {
        "gpuctl-a100-40gb", "gpuctl-t4-time-slicing-4", "gpuctl-a100-40gb-gpuctl-3g.20gb-2x2g.10gb"}


def test_manifests_hold_only_the_flavors_the_queue_uses_then_the_queues() -> None:
    team = make_tenant("team-a", 2, {}, None, False, "tenant", cohort="pool")
    docs = queue_manifests(team, NODES)
    assert [(d["kind"], d["metadata"]["name"]) for d in docs] == [
        ("ResourceFlavor", "gpuctl-t4-time-slicing-4"), ("ClusterQueue", "team-a"), ("LocalQueue", "team-a"),
        ("LocalQueue", "default")]
    assert docs[1]["spec"]["cohortName"] == "pool" and docs[2]["metadata"]["namespace"] == "team-a"
    # Kueue's Job webhook puts a Job without a queue label in its namespace's LocalQueue `default`: the team's
    assert docs[3]["metadata"] == {"name": "default", "namespace": "team-a",
                                   "labels": {"app.kubernetes.io/managed-by": "gpuctl"}}
    assert docs[3]["spec"] == {"clusterQueue": "team-a"}
    assert {k: v for k, v in team.hard().items() if v != "0"} == {"requests.nvidia.com/gpu": "2"}
