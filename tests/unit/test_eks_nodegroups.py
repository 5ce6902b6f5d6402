"""EKS node group choices: AMI type, instance type from the catalog, scaling, taint spelling."""

from __future__ import annotations

import pytest

from gpuctl.model.catalog import get_gpu
from gpuctl.model.spec import NodeGroupSpec
from gpuctl.model.taints import Taint
from gpuctl.providers.eks.nodegroups import check_ami_type, choose_instance_type, eks_taint, scaling_config
from gpuctl.util.errors import UsageError


def _spec(gpu: str, per_node: int, instance_type: str | None = None) -> NodeGroupSpec:
    return NodeGroupSpec("gpu", get_gpu(gpu), 1, per_node, instance_type=instance_type)


@pytest.mark.parametrize(("effect", "spelled"), [("NoSchedule", "NO_SCHEDULE"), ("NoExecute", "NO_EXECUTE"),
                                                 ("PreferNoSchedule", "PREFER_NO_SCHEDULE")])
def test_taints_in_eks_spelling(effect: str, spelled: str) -> None:
    assert eks_taint(Taint("nvidia.com/gpu", "true", effect)) == {"key": "nvidia.com/gpu", "value": "true",
                                                                  "effect": spelled}
    assert eks_taint(Taint("dedicated", "", effect)) == {"key": "dedicated", "effect": spelled}


@pytest.mark.parametrize(("gpu", "per_node", "expected"), [("t4", 1, "g4dn.xlarge"), ("t4", 4, "g4dn.12xlarge"),
                                                           ("a10g", 8, "g5.48xlarge"), ("h100-80gb", 8, "p5.48xlarge"),
                                                           ("h200", 8, "p5e.48xlarge")])
def test_smallest_catalog_instance_type_with_exactly_those_gpus(gpu: str, per_node: int, expected: str) -> None:
    assert choose_instance_type(_spec(gpu, per_node)) == expected


@pytest.mark.parametrize(("spec", "override", "field", "problem"), [
    (_spec("t4", 2), None, "--gpus-per-node", "no t4 instance type has 2 GPUs"),
    (_spec("a30", 1), None, "--gpu", "a30 is not offered on EC2"),
    (_spec("t4", 1), "g5.xlarge", "--instance-type", "g5.xlarge has a10g GPUs, not t4"),
    (_spec("t4", 1), "g4dn.12xlarge", "--gpus-per-node", "g4dn.12xlarge has 4 GPUs per node, not 1"),
])
def test_instance_type_mismatches_name_the_flag(spec: NodeGroupSpec, override: str | None, field: str,
                                                problem: str) -> None:
    with pytest.raises(UsageError) as error:
        choose_instance_type(NodeGroupSpec(spec.name, spec.gpu, spec.nodes, spec.gpus_per_node, instance_type=override))
    assert error.value.field == field and problem in error.value.message


def test_an_instance_type_unknown_to_the_catalog_is_taken_as_given() -> None:
    assert choose_instance_type(_spec("t4", 8, "g4dn.metal")) == "g4dn.metal"


def test_scaling_defaults_to_the_node_count() -> None:
    t4 = get_gpu("t4")
    assert scaling_config(NodeGroupSpec("g", t4, 3, 1)) == {"minSize": 3, "maxSize": 3, "desiredSize": 3}
    assert scaling_config(NodeGroupSpec("g", t4, 1, 1, 0, 4)) == {"minSize": 0, "maxSize": 4, "desiredSize": 1}


def test_only_nvidia_ami_types() -> None:
    assert check_ami_type("BOTTLEROCKET_x86_64_NVIDIA") == "BOTTLEROCKET_x86_64_NVIDIA"
    with pytest.raises(UsageError, match="--ami-type: 'AL2_x86_64' is not an NVIDIA GPU AMI type"):
        check_ami_type("AL2_x86_64")
