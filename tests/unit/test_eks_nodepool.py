"""Karpenter NodePool and EC2NodeClass rendering: strict templates, GPU requirements, taints, limits."""

from __future__ import annotations

import jinja2
import pytest

from gpuctl.catalog import get_gpu
from gpuctl.providers.eks.karpenter import is_subset, render_ec2nodeclass, render_nodepool
from gpuctl.spec import NodeGroupSpec
from gpuctl.taints import DEFAULT_GPU_TAINTS, Taint
from gpuctl.templating import render_template


def test_nodepool_for_a100_nodes() -> None:
    pool = render_nodepool(NodeGroupSpec("train", get_gpu("a100-40gb"), 2, 8), DEFAULT_GPU_TAINTS, max_nodes=3)
    assert (pool["apiVersion"], pool["kind"], pool["metadata"]["name"]) == ("karpenter.sh/v1", "NodePool", "gpuctl-train")
    assert pool["metadata"]["labels"] == {"app.kubernetes.io/managed-by": "gpuctl"}
    template = pool["spec"]["template"]
    assert template["metadata"]["labels"] == {"gpuctl.dev/nodegroup": "gpuctl-train", "gpuctl.dev/gpu": "a100-40gb",
                                              "gpuctl.dev/gpus-per-node": "8"}
    assert template["spec"]["requirements"] == [
        {"key": "karpenter.k8s.aws/instance-gpu-name", "operator": "In", "values": ["a100"]},
        {"key": "karpenter.k8s.aws/instance-gpu-count", "operator": "In", "values": ["8"]},
        {"key": "karpenter.sh/capacity-type", "operator": "In", "values": ["on-demand", "spot"]},
        {"key": "kubernetes.io/arch", "operator": "In", "values": ["amd64"]},
    ]
    assert template["spec"]["taints"] == [{"key": "nvidia.com/gpu", "value": "true", "effect": "NoSchedule"}]
    assert template["spec"]["nodeClassRef"] == {"group": "karpenter.k8s.aws", "kind": "EC2NodeClass",
                                                "name": "gpuctl-gpu"}
    assert template["spec"]["expireAfter"] == "720h"
    assert pool["spec"]["limits"] == {"nvidia.com/gpu": 24}
    assert pool["spec"]["disruption"] == {"consolidationPolicy": "WhenEmpty", "consolidateAfter": "10m"}


def test_taint_without_value_is_rendered_without_one() -> None:
    pool = render_nodepool(NodeGroupSpec("g", get_gpu("t4"), 1, 1), (Taint("dedicated", "", "NoExecute"),), 1)
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
