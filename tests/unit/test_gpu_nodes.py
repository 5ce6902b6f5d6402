"""gpu_nodes.unhealthy_gpus: the kubelet's record of unhealthy devices (capacity minus allocatable)."""

from __future__ import annotations

from typing import Any

from gpuctl.kube.gpu_nodes import unhealthy_gpus


def _node(capacity: dict[str, Any], allocatable: dict[str, Any]) -> dict[str, Any]:
    return {"status": {"capacity": capacity, "allocatable": allocatable}}


def test_all_healthy_is_empty() -> None:
    node = _node({"nvidia.com/gpu": "4", "cpu": "8"}, {"nvidia.com/gpu": "4", "cpu": "7900m"})
    assert unhealthy_gpus(node) == {}


def test_a_shared_gpu_counts_its_replicas() -> None:
    # 4 GPUs shared 4 ways = 16; one GPU unhealthy removes its 4 replicas from allocatable only.
    assert unhealthy_gpus(_node({"nvidia.com/gpu": "16"}, {"nvidia.com/gpu": "12"})) == {"nvidia.com/gpu": 4}


def test_mig_device_counts_one_of_its_profile() -> None:
    node = _node({"nvidia.com/mig-1g.5gb": "7", "nvidia.com/mig-3g.20gb": "2", "memory": "1Gi"},
                 {"nvidia.com/mig-1g.5gb": "6", "nvidia.com/mig-3g.20gb": "2", "memory": "1Gi"})
    assert unhealthy_gpus(node) == {"nvidia.com/mig-1g.5gb": 1}


def test_resource_missing_from_allocatable_is_all_unhealthy() -> None:
    # The kubelet writes a resource with no healthy device as 0 (or leaves it out): every device is unhealthy.
    assert unhealthy_gpus(_node({"nvidia.com/gpu": "2"}, {})) == {"nvidia.com/gpu": 2}
    assert unhealthy_gpus(_node({"nvidia.com/gpu": "2"}, {"nvidia.com/gpu": "0"})) == {"nvidia.com/gpu": 2}


def test_node_without_status_is_empty() -> None:
    assert unhealthy_gpus({}) == {}
