"""gpu_nodes.unhealthy_gpus: the kubelet's record of unhealthy devices (capacity minus allocatable)."""

from __future__ import annotations

from typing import Any

from gpuctl.kube.gpu_nodes import unhealthy_devices, unhealthy_gpus, unhealthy_whole_gpus


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


def test_devices_behind_the_counts_fold_a_shared_gpus_replicas_not_mig_devices() -> None:
    assert unhealthy_devices("nvidia.com/gpu", 4, 4, None) == 1  # one T4 shared 4 ways
    assert unhealthy_devices("nvidia.com/gpu", 5, 4, "all-disabled") == 2  # a GPU's replicas cut short: still a GPU
    assert unhealthy_devices("nvidia.com/gpu", 2, 1, "all-1g.5gb") == 2  # MIG's single strategy: MIG devices
    assert unhealthy_devices("nvidia.com/mig-1g.5gb", 3, 1, "all-1g.5gb") == 3
    assert unhealthy_whole_gpus({"nvidia.com/gpu": 8}, 4, None) == 2
    assert unhealthy_whole_gpus({"nvidia.com/mig-1g.5gb": 1}, 1, "all-1g.5gb") == 0
    assert unhealthy_whole_gpus({}, 1, None) == 0
