"""`gpuctl validate` in DRA mode, its pure parts (gpuctl/ops/validate.py): how many devices a node should
publish, the capacity and kubelet-plugin checks, the smoke test's claim and pod, the allocation check."""

from __future__ import annotations

from typing import Any

import pytest

from gpuctl.kube.kube_object import KubeObject
from gpuctl.model import labels as L
from gpuctl.model.catalog import get_gpu
from gpuctl.model.mig import config_name, parse_layout
from gpuctl.model.spec import SMOKE_IMAGE, NodeGroupSpec
from gpuctl.ops import smoke, validate
from gpuctl.ops.devices import NodeDevices
from gpuctl.simulator import dra
from gpuctl.simulator.nodes import node_labels


def node(name: str, gpu: str = "a100-40gb", gpus: int = 8, allocatable: dict[str, str] | None = None,
         **labels: str) -> KubeObject:
    group = NodeGroupSpec("g", get_gpu(gpu), 1, gpus)
    return KubeObject(apiVersion="v1", kind="Node",
                      metadata={"name": name, "labels": {**node_labels(group, name), **labels}},
                      status={"allocatable": {"cpu": "8", **(allocatable or {})}})


def label(key: str, value: str) -> dict[str, Any]:
    """One node label, as **label(key, value) for node(): typed Any, so mypy lets it past node's named parameters."""
    return {key: value}


def published(name: str, gpu: str = "a100-40gb", gpus: int = 8, layout: str | None = None,
              allocated: frozenset[str] = frozenset()) -> NodeDevices:
    model = get_gpu(gpu)
    return NodeDevices(tuple(dra.render_devices(name, model, gpus, parse_layout(layout, model) if layout else None)),
                       allocated)


def mig_labels(layout: str, state: str = "success", gpu: str = "a100-40gb") -> dict[str, Any]:
    return {L.MIG_CONFIG: config_name(parse_layout(layout, get_gpu(gpu))), L.MIG_STATE: state}


def test_one_device_per_gpu_without_mig() -> None:
    assert validate.expected_devices(node("a", gpus=8), {}) == 8
    # GFD's count where gpuctl's own label is absent
    bare = node("b", gpus=4)
    del bare.labels[L.GPUS_PER_NODE]
    assert validate.expected_devices(bare, {}) == 4
    assert validate.expected_devices(node("c", gpus=2, **label(L.MIG_CONFIG, "all-disabled")), {}) == 2


def test_mig_layout_counts_its_devices_on_every_gpu() -> None:
    # read back from gpuctl's config name (no MIG manager ConfigMap, e.g. the DRA driver without the operator)
    assert validate.expected_devices(node("a", gpus=2, **mig_labels("3g.20gb-2x2g.10gb")), {}) == 6
    assert validate.expected_devices(node("b", gpus=1, **mig_labels("all-1g.5gb")), {}) == 7
    # from the MIG manager's configs when they name it (whatever the name)
    configs = {"site-layout": {"1g.5gb": 3, "4g.20gb": 1}, "off": None}
    assert validate.expected_devices(node("c", gpus=4, **label(L.MIG_CONFIG, "site-layout")), configs) == 16
    assert validate.expected_devices(node("d", gpus=4, **label(L.MIG_CONFIG, "off")), configs) == 4
    with pytest.raises(ValueError, match="mig.config=no-such is no MIG layout"):
        validate.expected_devices(node("e", **label(L.MIG_CONFIG, "no-such")), {})


def test_capacity_passes_when_every_node_publishes_its_configuration() -> None:
    nodes = [node("a"), node("m", gpus=1, **mig_labels("3g.20gb-2x2g.10gb"))]
    devices = {"a": published("a", allocated=frozenset({"gpu-0", "gpu-3"})),
               "m": published("m", gpus=1, layout="3g.20gb-2x2g.10gb")}
    check = validate.check_dra_capacity(nodes, devices, {})
    assert check.ok, check.detail
    assert check.detail == "2 nodes publish what was configured: 11 devices of driver gpu.nvidia.com (2 allocated)"


def test_capacity_names_each_wrong_node() -> None:
    nodes = [node("a"), node("m", gpus=1, **mig_labels("3g.20gb-2x2g.10gb", state="pending")), node("gone"),
             node("twice", gpus=1, allocatable={"nvidia.com/gpu": "1"})]
    devices = {"a": published("a"), "m": published("m", gpus=1),  # the MIG manager has not applied it yet
               "twice": published("twice", gpus=1)}
    check = validate.check_dra_capacity(nodes, devices, {})
    assert not check.ok
    parts = check.detail.split("; ")
    assert parts[0] == "m publishes 1 devices, expected 3 (MIG config custom-3g.20gb-2x2g.10gb, state pending)"
    assert parts[1].startswith("gone publishes no ResourceSlice, expected 8 devices")
    assert parts[2].startswith("twice also advertises {'nvidia.com/gpu': 1} from a device plugin")
    assert "devicePlugin.enabled=false" in parts[2] and len(parts) == 3


def test_kubelet_plugin_check() -> None:
    ready = KubeObject(metadata={"name": "plugin", "namespace": "dra-driver-nvidia-gpu"},
                       status={"phase": "Running", "containerStatuses": []})
    ok = validate.check_kubelet_plugins([node("a"), node("b")], {"a": ready, "b": ready})
    assert ok.ok and ok.detail == "DRA kubelet plugin ready on 2 of 2 nodes (namespace dra-driver-nvidia-gpu)"
    bad = validate.check_kubelet_plugins([node("a"), node("b")], {"a": ready})
    assert not bad.ok and bad.name == "dra-driver"
    assert bad.detail.startswith("kubelet plugin ready on 1 of 2 nodes; b: missing; see 'kubectl get pods -A -l "
                                 "dra-driver-nvidia-gpu-component=kubelet-plugin'")


def test_smoke_pod_gets_its_gpu_from_the_claim() -> None:
    pod = smoke.smoke_pod("s", SMOKE_IMAGE, "gpu.nvidia.com", {L.NODEGROUP: "t4"},
                             [{"key": "nvidia.com/gpu", "operator": "Exists", "effect": "NoSchedule"}], claim="s")
    spec = pod["spec"]
    assert spec["resourceClaims"] == [{"name": "gpu", "resourceClaimName": "s"}]
    assert spec["containers"][0]["resources"] == {"claims": [{"name": "gpu"}]}  # no nvidia.com/gpu limit
    assert spec["nodeSelector"] == {L.NFD_NVIDIA_PCI: "true", L.NODEGROUP: "t4"}
    classic = smoke.smoke_pod("s", SMOKE_IMAGE, "nvidia.com/gpu", {}, [])
    assert classic["spec"]["containers"][0]["resources"] == {"limits": {"nvidia.com/gpu": "1"}}
    assert classic["spec"]["nodeSelector"] == {"nvidia.com/gpu.present": "true"}
    # for Karpenter to launch a node for: only what the NodePool promises, not what the GPU stack labels later
    launch = smoke.smoke_pod("s", SMOKE_IMAGE, "nvidia.com/gpu", {L.NODEGROUP: "t4"}, [], launch=True)
    assert launch["spec"]["nodeSelector"] == {L.NODEGROUP: "t4"}
    assert "resourceClaims" not in classic["spec"]
    claim = smoke.smoke_claim("s", "mig.nvidia.com")
    assert claim["metadata"]["namespace"] == smoke.SMOKE_NAMESPACE
    assert claim["metadata"]["labels"][L.MANAGED_BY] == L.MANAGER
    assert claim["spec"]["devices"]["requests"] == [
        {"name": "gpu", "exactly": {"deviceClassName": "mig.nvidia.com", "allocationMode": "ExactCount", "count": 1}}]


def allocation(*results: tuple[str, str, str]) -> dict[str, Any]:
    return {"devices": {"results": [{"request": "gpu", "driver": d, "pool": p, "device": n} for d, p, n in results]}}


def test_allocation_must_be_on_the_pods_node_in_the_group() -> None:
    group = {"t4-0", "t4-1"}
    assert validate.check_allocation(allocation(("gpu.nvidia.com", "t4-0", "gpu-0")), "t4-0", group) is None
    assert validate.check_allocation(None, "t4-0", group) == "its ResourceClaim was never allocated"
    assert "not of t4-0" in (validate.check_allocation(allocation(("gpu.nvidia.com", "t4-1", "gpu-0")), "t4-0", group) or "")
    assert "not a node of the node group" in (validate.check_allocation(
        allocation(("gpu.nvidia.com", "a100-0", "gpu-0")), "a100-0", group) or "")
    assert "no device of driver gpu.nvidia.com" in (validate.check_allocation(
        allocation(("net.example.com", "t4-0", "eth-0")), "t4-0", group) or "")


# -- what the device plugin should advertise, MIG strategy from GFD's label or the ClusterPolicy --------------------


MIXED = parse_layout("3g.20gb-2x2g.10gb", get_gpu("a100-40gb"))
MIXED_CONFIGS = validate.DeviceConfigs({}, {config_name(MIXED): {"3g.20gb": 1, "2g.10gb": 2}}, "mixed")
MIXED_RESOURCES = {"nvidia.com/mig-3g.20gb": 1, "nvidia.com/mig-2g.10gb": 2}


def test_a_node_gfd_has_not_labelled_yet_is_expected_at_the_cluster_policys_strategy() -> None:
    """MIG manager answers before GFD labels the strategy (GFD relabels on its own schedule): no label is no
    strategy, not the operator's default (single, which a mixed layout refuses: exit 2 mid-apply, before)."""
    fresh = node("a", gpus=1, **label(L.MIG_CONFIG, config_name(MIXED)))
    assert validate.expected_resources(fresh, MIXED_CONFIGS) == MIXED_RESOURCES


def test_a_strategy_label_from_before_the_change_gives_way_to_the_cluster_policys() -> None:
    stale = node("a", gpus=1, **label(L.MIG_CONFIG, config_name(MIXED)), **label(L.MIG_STRATEGY, "single"))
    assert validate.expected_resources(stale, MIXED_CONFIGS) == MIXED_RESOURCES
    single = parse_layout("all-1g.5gb", get_gpu("a100-40gb"))
    one_profile = node("b", gpus=1, **label(L.MIG_CONFIG, config_name(single)), **label(L.MIG_STRATEGY, "single"))
    configs = validate.DeviceConfigs({}, {config_name(single): {"1g.5gb": 7}}, "mixed")
    assert validate.expected_resources(one_profile, configs) == {"nvidia.com/gpu": 7}  # the label: what runs now
