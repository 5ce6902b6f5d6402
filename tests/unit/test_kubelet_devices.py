"""The sim's kubelet device manager (gpuctl/simulator/kubelet_devices.py), decided on plain Node objects: a plugin
that went leaves its devices unhealthy at once (allocatable 0, capacity kept) and removed after the 5-minute
grace (capacity 0), timed from the node's own record; a node Karpenter launched offers none until a plugin
served it; a host plugin's node is left as it is."""

from __future__ import annotations

from datetime import datetime, timedelta, timezone
from typing import Any

from gpuctl.kube.kube_object import KubeObject
from gpuctl.simulator.kubelet_devices import DISCONNECTED, GRACE_S, DeviceWrite, device_write

SERVED = "sim.gpuctl.dev/device-plugin-loaded"
NOW = datetime(2026, 11, 27, 0, 0, 0, tzinfo=timezone.utc)


def node(gpus: int, allocatable: int | None = None, annotations: dict[str, str] | None = None,
         labels: dict[str, str] | None = None) -> KubeObject:
    status: dict[str, Any] = {"capacity": {"cpu": "8", "nvidia.com/gpu": str(gpus)},
                              "allocatable": {"cpu": "8", "nvidia.com/gpu": str(gpus if allocatable is None
                                                                                else allocatable)}}
    return KubeObject({"metadata": {"name": "gpu-0", "annotations": annotations or {}, "labels": labels or {}},
                       "status": status})


def test_the_last_plugin_going_marks_every_device_unhealthy_at_once_and_starts_the_grace() -> None:
    write = device_write(node(4, annotations={SERVED: "{}"}), False, SERVED, NOW)
    assert write == DeviceWrite({DISCONNECTED: "2026-11-27T00:00:00Z"}, {}, {"nvidia.com/gpu": "0"})


def test_within_the_grace_capacity_stays_and_after_it_the_resource_is_removed_at_0() -> None:
    gone = {SERVED: "{}", DISCONNECTED: "2026-11-27T00:00:00Z"}
    waiting = node(4, 0, gone)
    assert device_write(waiting, False, SERVED, NOW + timedelta(seconds=GRACE_S - 1)).empty
    assert GRACE_S == 300.0  # endpointStopGracePeriod, pkg/kubelet/cm/devicemanager/types.go
    # the time is the node's record, not this process's: a restarted operator times it from the annotation
    expired = device_write(waiting, False, SERVED, NOW + timedelta(seconds=GRACE_S))
    assert expired == DeviceWrite({}, {"nvidia.com/gpu": "0"}, {})


def test_a_plugin_running_again_clears_the_record_and_leaves_its_devices_to_it() -> None:
    back = node(4, 0, {SERVED: "{}", DISCONNECTED: "2026-11-27T00:00:00Z"})
    assert device_write(back, True, SERVED, NOW) == DeviceWrite({DISCONNECTED: None}, {}, {})
    assert device_write(node(4, annotations={SERVED: "{}"}), True, SERVED, NOW).empty


def test_a_node_karpenter_launched_offers_no_gpu_before_a_plugin_served_it() -> None:
    launched = node(2, labels={"karpenter.sh/nodepool": "gpu"})
    assert device_write(launched, False, SERVED, NOW) == DeviceWrite({}, {"nvidia.com/gpu": "0"},
                                                                     {"nvidia.com/gpu": "0"})
    # its plugin pod has started: the sim's operator loads its config and advertises its GPUs
    assert device_write(launched, True, SERVED, NOW).empty


def test_a_host_plugins_node_and_a_node_offering_nothing_are_left_alone() -> None:
    assert device_write(node(1), False, SERVED, NOW).empty  # Bottlerocket's plugin on the host: no pod
    done = node(0, 0, {SERVED: "{}", DISCONNECTED: "2026-11-27T00:00:00Z"})
    assert device_write(done, False, SERVED, NOW) == DeviceWrite({DISCONNECTED: None}, {}, {})
    assert device_write(node(0, 0, {SERVED: "{}"}), False, SERVED, NOW).empty


def test_mig_resources_follow_the_same_rule() -> None:
    mig = KubeObject({"metadata": {"name": "a100-0", "annotations": {SERVED: "{}"}, "labels": {}},
                      "status": {"capacity": {"nvidia.com/mig-1g.5gb": "7", "nvidia.com/gpu": "0"},
                                 "allocatable": {"nvidia.com/mig-1g.5gb": "7", "nvidia.com/gpu": "0"}}})
    assert device_write(mig, False, SERVED, NOW).allocatable == {"nvidia.com/mig-1g.5gb": "0"}
