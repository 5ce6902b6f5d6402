"""Karpenter objects: NodePool, NodeOverlay (stack/karpenter.py) and EC2NodeClass rendering: strict templates, GPU
requirements, taints, limits, what a shared node advertises."""

from __future__ import annotations

import json
from pathlib import Path

import jinja2
import pytest

from gpuctl.model.catalog import GPUS, get_gpu
from gpuctl.model.mig import parse_layout
from gpuctl.model.sharing import Sharing
from gpuctl.model.spec import GroupPlan, NodeGroupSpec
from gpuctl.model.taints import Taint
from gpuctl.providers.eks.karpenter import EC2_NODE_CLASS, render_ec2nodeclass
from gpuctl.providers.eks.provider import NODEGROUP_LABEL
from gpuctl.stack.karpenter import is_subset, render_nodeoverlay, render_nodepool
from gpuctl.util.templating import render_template


def test_nodepool_for_a100_nodes() -> None:
    pool = render_nodepool(GroupPlan(NodeGroupSpec("train", get_gpu("a100-40gb"), 2, 8)), 3, NODEGROUP_LABEL, EC2_NODE_CLASS, "mixed")
    assert (pool["apiVersion"], pool["kind"], pool["metadata"]["name"]) == ("karpenter.sh/v1", "NodePool", "gpuctl-train")
    assert pool["metadata"]["labels"] == {"app.kubernetes.io/managed-by": "gpuctl"}
    template = pool["spec"]["template"]
    assert template["metadata"]["labels"] == {"eks.amazonaws.com/nodegroup": "train", "gpuctl.dev/nodegroup": "train",
                                              "gpuctl.dev/gpu": "a100-40gb", "gpuctl.dev/gpus-per-node": "8"}
    assert template["spec"]["requirements"] == [
        {"key": "karpenter.k8s.aws/instance-gpu-name", "operator": "In", "values": ["a100"]},
        {"key": "karpenter.k8s.aws/instance-gpu-memory", "operator": "In", "values": ["40960"]},
        {"key": "karpenter.k8s.aws/instance-gpu-count", "operator": "In", "values": ["8"]},
        {"key": "karpenter.sh/capacity-type", "operator": "In", "values": ["on-demand", "spot"]},
        {"key": "kubernetes.io/arch", "operator": "In", "values": ["amd64"]},
    ]
    assert template["spec"]["taints"] == [{"key": "nvidia.com/gpu", "value": "true", "effect": "NoSchedule"}]
    assert template["spec"]["nodeClassRef"] == {"group": "karpenter.k8s.aws", "kind": "EC2NodeClass",
                                                "name": "gpuctl-gpu"}
    assert template["spec"]["expireAfter"] == "720h"
    assert template["spec"]["startupTaints"] == []  # the sim's own (simulator/nodes.py DEVICES_PENDING) only there
    assert pool["spec"]["limits"] == {"nodes": 3, "nvidia.com/gpu": 24}
    assert pool["spec"]["disruption"] == {"consolidationPolicy": "WhenEmpty", "consolidateAfter": "10m"}


UPSTREAM_TYPES = Path(__file__).parents[3] / "shared/upstream/karpenter-provider-aws-v1.14.1/instance-types-gpu.json"


def _admits(requirements: list[dict], labels: dict[str, str]) -> bool:
    # capacity type is an offering of an instance type, not one of its labels
    return all(labels.get(r["key"]) in r["values"] for r in requirements if r["key"] != "karpenter.sh/capacity-type")


@pytest.mark.parametrize("gpu", [m.name for m in GPUS.values() if m.instance_types])
def test_nodepool_admits_only_instance_types_of_its_gpu(gpu: str) -> None:
    """Against Karpenter's own instance-type labels: a pool admits the catalog's instance types and no
    type whose GPUs differ from theirs (p4d's A100 40 GB and p4de's A100 80 GB are both `a100`)."""
    model = get_gpu(gpu)
    upstream = json.loads(UPSTREAM_TYPES.read_text())
    for per_node in sorted({t.gpus for t in model.instance_types}):
        pool = render_nodepool(GroupPlan(NodeGroupSpec("g", model, 1, per_node)), 1, NODEGROUP_LABEL, EC2_NODE_CLASS, "mixed")
        requirements = pool["spec"]["template"]["spec"]["requirements"]
        admitted = {name for name, labels in upstream.items() if _admits(requirements, labels)}
        ours = {t.name for t in model.instance_types if t.gpus == per_node}
        assert ours <= admitted, (gpu, per_node)
        gpu_of = {upstream[n]["karpenter.k8s.aws/instance-gpu-name"] + "/" + upstream[n]["karpenter.k8s.aws/instance-gpu-memory"]
                  for n in admitted | ours}
        assert len(gpu_of) == 1, (gpu, per_node, sorted(admitted))


def test_launched_nodes_join_as_the_groups_with_its_sharing() -> None:
    """A node Karpenter launches carries what gpuctl gives the group's nodes: the label status and validate
    select on, the group's own labels, and the device-plugin or MIG config the operator serves it by."""
    sliced = GroupPlan(NodeGroupSpec("infer", get_gpu("t4"), 0, 1, max_nodes=3), Sharing("time-slicing", 4),
                       labels={"team": "ml"})
    labels = render_nodepool(sliced, 3, NODEGROUP_LABEL, EC2_NODE_CLASS, "mixed")["spec"]["template"]["metadata"]["labels"]
    assert labels["eks.amazonaws.com/nodegroup"] == "infer" and labels["team"] == "ml"
    assert labels["nvidia.com/device-plugin.config"] == sliced.sharing.config_key
    assert "nvidia.com/mig.config" not in labels
    a100 = get_gpu("a100-40gb")
    mig = GroupPlan(NodeGroupSpec("mig", a100, 1, 8), mig=parse_layout("3g.20gb-2x2g.10gb", a100))
    labels = render_nodepool(mig, 1, NODEGROUP_LABEL, EC2_NODE_CLASS, "mixed")["spec"]["template"]["metadata"]["labels"]
    assert labels["nvidia.com/mig.config"] == "custom-3g.20gb-2x2g.10gb"
    assert "nvidia.com/device-plugin.config" not in labels


def test_limits_hold_max_nodes_in_the_currency_nodes_advertise() -> None:
    """`nodes` caps the pool whatever a node advertises; the GPU limit counts GPUs as the nodes advertise them
    (4 per time-sliced T4), so that an overlaid node is not refused by a limit in physical GPUs."""
    t4 = get_gpu("t4")
    sliced = GroupPlan(NodeGroupSpec("infer", t4, 0, 1, max_nodes=3), Sharing("time-slicing", 4))
    assert render_nodepool(sliced, 3, NODEGROUP_LABEL, EC2_NODE_CLASS, "mixed")["spec"]["limits"] == {
        "nodes": 3, "nvidia.com/gpu": 12}
    a100 = get_gpu("a100-40gb")
    mig = GroupPlan(NodeGroupSpec("mig", a100, 0, 8, max_nodes=2), mig=parse_layout("3g.20gb-2x2g.10gb", a100))
    assert render_nodepool(mig, 2, NODEGROUP_LABEL, EC2_NODE_CLASS, "mixed")["spec"]["limits"] == {"nodes": 2}


def test_overlay_declares_what_a_shared_node_advertises() -> None:
    t4, a100 = get_gpu("t4"), get_gpu("a100-40gb")
    assert render_nodeoverlay(GroupPlan(NodeGroupSpec("whole", t4, 1, 1)), "mixed") is None
    overlay = render_nodeoverlay(GroupPlan(NodeGroupSpec("infer", t4, 0, 4), Sharing("mps", 2)), "mixed")
    assert overlay is not None
    assert (overlay["apiVersion"], overlay["kind"], overlay["metadata"]["name"]) == (
        "karpenter.sh/v1alpha1", "NodeOverlay", "gpuctl-infer")
    assert overlay["spec"]["requirements"] == [{"key": "karpenter.sh/nodepool", "operator": "In",
                                                "values": ["gpuctl-infer"]}]
    assert overlay["spec"]["capacity"] == {"nvidia.com/gpu": "8"}
    mig = GroupPlan(NodeGroupSpec("mig", a100, 0, 8), mig=parse_layout("3g.20gb-2x2g.10gb", a100))
    overlay = render_nodeoverlay(mig, "mixed")
    assert overlay is not None
    assert overlay["spec"]["capacity"] == {"nvidia.com/gpu": "0", "nvidia.com/mig-3g.20gb": "8",
                                           "nvidia.com/mig-2g.10gb": "16"}
    single = GroupPlan(NodeGroupSpec("one", a100, 0, 8), mig=parse_layout("all-1g.5gb", a100))
    overlay = render_nodeoverlay(single, "single")
    assert overlay is not None
    assert overlay["spec"]["capacity"] == {"nvidia.com/gpu": "56"}


def test_taint_without_value_is_rendered_without_one() -> None:
    group = NodeGroupSpec("g", get_gpu("t4"), 1, 1, taints=(Taint("dedicated", "", "NoExecute"),))
    pool = render_nodepool(GroupPlan(group), 1, NODEGROUP_LABEL, EC2_NODE_CLASS, "mixed")
    assert pool["spec"]["template"]["spec"]["taints"] == [{"key": "dedicated", "effect": "NoExecute"}]


@pytest.mark.parametrize(("ami_type", "alias"), [("AL2023_x86_64_NVIDIA", "al2023@latest"),
                                                 ("BOTTLEROCKET_x86_64_NVIDIA", "bottlerocket@latest"),
                                                 ("AL2_x86_64_GPU", "al2@latest")])
def test_ec2nodeclass(ami_type: str, alias: str) -> None:
    node_class = render_ec2nodeclass("prod", "gpuctl-prod-node", ami_type)
    assert (node_class["apiVersion"], node_class["kind"]) == ("karpenter.k8s.aws/v1", "EC2NodeClass")
    assert node_class["spec"] == {
        "role": "gpuctl-prod-node",
        "amiSelectorTerms": [{"alias": alias}],
        "subnetSelectorTerms": [{"tags": {"karpenter.sh/discovery": "prod"}}],
        "securityGroupSelectorTerms": [{"tags": {"karpenter.sh/discovery": "prod"}}],
        "tags": {"gpuctl.dev/managed-by": "gpuctl"},
    }


def test_values_cannot_inject_yaml() -> None:
    node_class = render_ec2nodeclass("prod", "role\nspec: {role: evil}", "AL2023_x86_64_NVIDIA")
    assert node_class["spec"]["role"] == "role\nspec: {role: evil}"


def test_templates_are_strict() -> None:
    # An undefined value never renders as '': through |tojson StrictUndefined fails as unserialisable.
    with pytest.raises((jinja2.UndefinedError, TypeError), match="Undefined"):
        render_template("ec2nodeclass.yaml.j2", directory="nodepools", resource_name="x", managed_labels={},
                        cluster="c", role="r", instance_tags={})


def test_is_subset_ignores_what_the_server_adds_but_not_what_differs() -> None:
    want = {"spec": {"limits": {"nvidia.com/gpu": 4}, "taints": [{"key": "a", "effect": "NoSchedule"}]}}
    have = {"metadata": {"uid": "1"}, "spec": {"limits": {"nvidia.com/gpu": 4}, "weight": 1,
                                               "taints": [{"key": "a", "effect": "NoSchedule", "value": ""}]}}
    assert is_subset(want, have)
    assert not is_subset(want, {"spec": {"limits": {"nvidia.com/gpu": 8}, "taints": want["spec"]["taints"]}})
    assert not is_subset(want, {"spec": {"limits": {"nvidia.com/gpu": 4}, "taints": []}})


def test_sim_instance_types_are_the_catalogs_ec2_types() -> None:
    """The kwok provider's instance types (its InstanceTypeOptions JSON): every priced catalog type, its physical
    GPUs as nvidia.com/gpu (what the AWS provider declares; sharing is the overlay's to say), and single-valued
    offering requirements, which the kwok provider turns into the node's labels: the AWS GPU labels the pools
    select on, a zone and capacity type (an offering without them is unschedulable), the NFD/GFD labels."""
    from gpuctl.simulator.karpenter import instance_types

    types = {t["name"]: t for t in instance_types()}
    priced = {it.name for m in GPUS.values() for it in m.instance_types if it.price is not None}
    assert set(types) == priced and "p5e.48xlarge" not in types
    g4dn = types["g4dn.xlarge"]
    assert g4dn["resources"] == {"cpu": "4", "memory": "16384Mi", "pods": "29", "ephemeral-storage": "500Gi",
                                 "nvidia.com/gpu": "1"}
    [offering] = g4dn["offerings"]
    assert offering["Price"] == 0.526 and offering["Available"] is True
    labels = {r["key"]: r["values"] for r in offering["Requirements"]}
    assert all(r["operator"] == "In" and len(r["values"]) == 1 for r in offering["Requirements"])
    assert labels["karpenter.k8s.aws/instance-gpu-name"] == ["t4"]
    assert labels["karpenter.k8s.aws/instance-gpu-memory"] == ["16384"]
    assert labels["karpenter.sh/capacity-type"] == ["on-demand"] and "topology.kubernetes.io/zone" in labels
    assert labels["feature.node.kubernetes.io/pci-10de.present"] == ["true"]
    assert labels["nvidia.com/gpu.product"] == ["Tesla-T4"] and labels["nvidia.com/gpu.count"] == ["1"]
