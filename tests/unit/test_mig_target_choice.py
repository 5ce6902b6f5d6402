"""`mig apply LAYOUT` with no --nodegroup/--selector (gpuctl/ops/mig_apply.py, choose_nodegroup): the one node group
whose GPUs take the layout on gpuctl's MIG geometry; several or none are refused naming the groups, on nodes and
records given as data (tests/integration/test_mig_target.py runs it on a sim cluster)."""

from __future__ import annotations

import pytest

from gpuctl.kube.kube_object import KubeObject
from gpuctl.model.catalog import GPUS
from gpuctl.model.spec import GroupPlan, NodeGroupSpec
from gpuctl.ops.mig_apply import choose_nodegroup, group_fits
from gpuctl.util.errors import UsageError

LAYOUT = "3g.20gb-2x2g.10gb"


def node(name: str, group: str | None, gpu: str, label: str = "gpuctl.dev/nodegroup") -> KubeObject:
    labels = {"gpuctl.dev/gpu": gpu, **({label: group} if group else {})}
    return KubeObject(apiVersion="v1", kind="Node", metadata={"name": name, "labels": labels})


def test_the_one_a100_group_is_chosen_beside_a_t4_group() -> None:
    nodes = [node("gpu-0", "gpu", "a100-40gb"), node("gpu-1", "gpu", "a100-40gb"), node("t4-0", "t4", "t4")]
    chosen = choose_nodegroup(group_fits(nodes, {}, LAYOUT), LAYOUT)
    assert str(chosen) == "'gpu' (a100-40gb, 2 nodes)"


def test_a_providers_node_group_label_names_the_group_too() -> None:
    nodes = [node("ip-10-0-0-1", "ml", "a100-40gb", "eks.amazonaws.com/nodegroup")]
    assert choose_nodegroup(group_fits(nodes, {}, LAYOUT), LAYOUT).name == "ml"


def test_two_groups_that_take_the_layout_are_both_named() -> None:
    nodes = [node("gpu-0", "gpu", "a100-40gb"), node("big-0", "big", "a100-80gb")]
    with pytest.raises(UsageError) as caught:
        choose_nodegroup(group_fits(nodes, {}, "all-balanced"), "all-balanced")
    assert caught.value.one_line() == ("--nodegroup: layout 'all-balanced' fits 2 node groups: 'big' (a100-80gb, "
                                       "1 node), 'gpu' (a100-40gb, 1 node); pass --nodegroup NAME to choose one")


def test_no_group_that_takes_it_says_why_for_each() -> None:
    nodes = [node("t4-0", "gpu", "t4"), node("big-0", "big", "a100-80gb")]
    with pytest.raises(UsageError) as caught:
        choose_nodegroup(group_fits(nodes, {}, LAYOUT), LAYOUT)
    line = caught.value.one_line()
    assert line.startswith(f"LAYOUT: no node group takes '{LAYOUT}': 'big' (a100-80gb, 1 node): unknown profile "
                           "'3g.20gb' for a100-80gb; 'gpu' (t4, 1 node): t4 does not support MIG; ")


def test_a_recorded_group_without_nodes_is_named_but_not_chosen() -> None:
    recorded = {"pool": GroupPlan(NodeGroupSpec("pool", GPUS["a100-40gb"], 0, 8))}
    fits = group_fits([node("gpu-0", "gpu", "a100-40gb")], recorded, LAYOUT)
    assert [(f.name, f.unfit) for f in fits] == [("gpu", None), ("pool", "no GPU nodes now")]
    assert choose_nodegroup(fits, LAYOUT).name == "gpu"


def test_a_cluster_without_gpu_node_groups_is_told_how_to_add_one() -> None:
    with pytest.raises(UsageError, match="^--nodegroup: no GPU node group on this cluster"):
        choose_nodegroup(group_fits([node("x-0", None, "a100-40gb")], {}, LAYOUT), LAYOUT)
