"""The sim's ResourceSlices: what NVIDIA's DRA driver v0.4.1 would publish for a node (gpuctl/simulator/dra.py)."""

from __future__ import annotations

import re
from typing import Any

import pytest

from gpuctl.model import labels as L
from gpuctl.model.catalog import GPUS, NVML_NAMES, get_gpu
from gpuctl.model.mig import config_name, parse_layout
from gpuctl.model.spec import NodeGroupSpec
from gpuctl.simulator import dra
from gpuctl.simulator.nodes import render_node, render_system_node

GPU_UUID = re.compile(r"GPU-[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}")
MIG_UUID = re.compile(r"MIG-[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}")
BDF = re.compile(r"[0-9a-f]{4}:[0-9a-f]{2}:[0-9a-f]{2}\.[0-9a-f]")  # deviceattribute's verifyPCIBDFFormat


def attrs(device: dict) -> dict[str, Any]:
    return {k: next(iter(v.values())) for k, v in device["attributes"].items()}


def capacity(device: dict) -> dict[str, str]:
    return {k: v["value"] for k, v in device["capacity"].items()}


def node_json(group: str, gpu: str, gpus: int, index: int = 0, **labels: str) -> dict:
    node = render_node(NodeGroupSpec(group, get_gpu(gpu), 1, gpus), index)
    node["metadata"]["uid"] = f"uid-{node['metadata']['name']}"
    node["metadata"]["labels"].update(labels)
    return node


def test_t4_node_one_full_gpu() -> None:
    [device] = dra.render_devices("t4-0", get_gpu("t4"), 1)
    assert device["name"] == "gpu-0"
    a = attrs(device)
    assert {k: a[k] for k in ("type", "productName", "brand", "architecture", "cudaComputeCapability",
                              "driverVersion", "cudaDriverVersion")} == {
        "type": "gpu", "productName": "Tesla T4", "brand": "Nvidia", "architecture": "Turing",
        "cudaComputeCapability": "7.5.0", "driverVersion": "570.172.8", "cudaDriverVersion": "12.8.0"}
    assert GPU_UUID.fullmatch(a["uuid"])
    assert BDF.fullmatch(a["resource.kubernetes.io/pciBusID"])
    assert re.fullmatch(r"pci[0-9a-f]{4}:[0-9a-f]{2}", a["resource.kubernetes.io/pcieRoot"])
    # version attributes are typed as versions (semver), so CEL can compare them
    assert device["attributes"]["cudaComputeCapability"] == {"version": "7.5.0"}
    assert capacity(device) == {"memory": "15Gi"}  # 15360 MiB, nvidia.com/gpu.memory


def test_a100_node_eight_gpus() -> None:
    model = get_gpu("a100-40gb")
    devices = dra.render_devices("a100-0", model, 8)
    assert [d["name"] for d in devices] == [f"gpu-{i}" for i in range(8)]
    assert {attrs(d)["productName"] for d in devices} == {"NVIDIA A100-SXM4-40GB"}
    assert {attrs(d)["architecture"] for d in devices} == {"Ampere"}
    assert {attrs(d)["cudaComputeCapability"] for d in devices} == {"8.0.0"}
    assert {capacity(d)["memory"] for d in devices} == {"40Gi"}
    uuids = [attrs(d)["uuid"] for d in devices]
    buses = [attrs(d)["resource.kubernetes.io/pciBusID"] for d in devices]
    assert len(set(uuids)) == 8 and len(set(buses)) == 8
    # stable for one node, different on another: a republish changes nothing, two nodes never share a GPU
    assert uuids == [attrs(d)["uuid"] for d in dra.render_devices("a100-0", model, 8)]
    assert set(uuids).isdisjoint(attrs(d)["uuid"] for d in dra.render_devices("a100-1", model, 8))


def test_a100_with_mig_layout_has_only_mig_devices() -> None:
    model = get_gpu("a100-40gb")
    layout = parse_layout("3g.20gb-2x2g.10gb", model)
    devices = dra.render_devices("a100-0", model, 8, layout)
    assert len(devices) == 24 and all(attrs(d)["type"] == "mig" for d in devices)
    # mig.go:111-114 gpu-<minor>-mig-<profile without dots>-<GI profile ID>-<placement start>; 2g@0, 2g@2, 3g@4
    assert [d["name"] for d in devices[:3]] == ["gpu-0-mig-2g10gb-14-0", "gpu-0-mig-2g10gb-14-2",
                                                "gpu-0-mig-3g20gb-9-4"]
    assert devices[-1]["name"] == "gpu-7-mig-3g20gb-9-4"
    three_g = devices[2]
    a = attrs(three_g)
    assert a["profile"] == "3g.20gb" and a["productName"] == "NVIDIA A100-SXM4-40GB"
    assert a["parentUUID"] == dra.gpu_uuid("a100-0", 0) and MIG_UUID.fullmatch(a["uuid"])
    assert "resource.kubernetes.io/pciBusID" in a
    assert capacity(three_g) == {
        "multiprocessors": "42", "copyEngines": "3", "decoders": "2", "encoders": "0", "jpegEngines": "0",
        "ofaEngines": "0", "memory": "19968Mi",
        "memorySlice4": "1", "memorySlice5": "1", "memorySlice6": "1", "memorySlice7": "1"}
    assert capacity(devices[0])["memorySlice0"] == "1" and "memorySlice2" not in capacity(devices[0])
    assert len({attrs(d)["uuid"] for d in devices}) == 24


def test_media_extension_profile_name() -> None:
    model = get_gpu("a100-40gb")
    devices = dra.render_devices("n", model, 1, parse_layout("1g.5gb+me-6x1g.5gb", model))
    names = [d["name"] for d in devices]
    assert names == [f"gpu-0-mig-1g5gb-19-{s}" for s in range(6)] + ["gpu-0-mig-1g5gb-me-20-6"]
    assert all(re.fullmatch(r"[a-z0-9-]{1,63}", n) for n in names)  # a DRA device name is a DNS label


def test_mig_disabled_or_without_instances() -> None:
    model = get_gpu("a100-40gb")
    assert [d["name"] for d in dra.render_devices("n", model, 2, parse_layout("all-disabled", model))] == [
        "gpu-0", "gpu-1"]
    # MIG on and no instance: the GPU publishes nothing (nvlib.go:302-324)
    assert dra.render_devices("n", model, 2, parse_layout("all-enabled", model)) == []


def test_node_slice_from_labels() -> None:
    node = node_json("a100", "a100-40gb", 8)
    body = dra.render_node_slice(node)
    assert body is not None
    meta, spec = body["metadata"], body["spec"]
    assert body["apiVersion"] == "resource.k8s.io/v1" and body["kind"] == "ResourceSlice"
    assert meta["name"].startswith("00000-gpu.nvidia.com-a100-0-") and len(meta["name"]) == 33
    assert meta["ownerReferences"] == [{"apiVersion": "v1", "kind": "Node", "name": "a100-0", "uid": "uid-a100-0",
                                        "controller": True}]
    assert meta["labels"] == {L.MANAGED_BY: L.MANAGER}
    assert spec["driver"] == "gpu.nvidia.com" and spec["nodeName"] == "a100-0"
    assert spec["pool"] == {"name": "a100-0", "generation": 1, "resourceSliceCount": 1}
    assert len(spec["devices"]) == 8
    # the GPU model comes from the catalog label, not GFD's product (the operator rewrites it: -SHARED, -MIG-...)
    node["metadata"]["labels"][L.GPU_PRODUCT] = "NVIDIA-A100-SXM4-40GB-SHARED"
    assert dra.render_node_slice(node) == body
    assert dra.render_node_slice(render_system_node() | {"metadata": {"name": "system-0", "uid": "u"}}) is None


def test_slice_name_is_a_generated_name() -> None:
    long = "n" * 200
    name = dra.slice_name(long)
    assert len(name) == 63 and name.startswith("00000-gpu.nvidia.com-nnn")  # 58 + 5, as the API server cuts
    assert re.fullmatch(r"[bcdfghjklmnpqrstvwxz2456789]{5}", name[-5:])
    assert dra.slice_name("a") == dra.slice_name("a") != dra.slice_name("b")


def test_mig_layout_applied_only_on_success() -> None:
    model = get_gpu("a100-40gb")
    layout = parse_layout("3g.20gb-2x2g.10gb", model)
    label = config_name(layout)
    assert label == "custom-3g.20gb-2x2g.10gb"
    assert dra.node_layout({L.MIG_CONFIG: label, L.MIG_STATE: "success"}, model) == layout
    assert dra.node_layout({L.MIG_CONFIG: label, L.MIG_STATE: "pending"}, model) is None
    assert dra.node_layout({L.MIG_CONFIG: label}, model) is None
    me = parse_layout("1g.5gb+me-2x2g.10gb", model)
    assert dra.node_layout({L.MIG_CONFIG: config_name(me), L.MIG_STATE: "success"}, model) == me
    balanced = dra.node_layout({L.MIG_CONFIG: "all-balanced", L.MIG_STATE: "success"}, model)
    assert balanced is not None and len(balanced.profiles) == 4
    with pytest.raises(ValueError, match="no MIG layout of a100-40gb"):
        dra.node_layout({L.MIG_CONFIG: "custom-3g.40gb", L.MIG_STATE: "success"}, model)
    node = node_json("a100", "a100-40gb", 2, **{L.MIG_CONFIG: label, L.MIG_STATE: "success"})  # type: ignore[arg-type]
    body = dra.render_node_slice(node)
    assert body is not None and len(body["spec"]["devices"]) == 6


def test_every_catalog_gpu_has_its_nvml_name_and_mig_profile_info() -> None:
    for model in GPUS.values():
        name = NVML_NAMES[model.name]
        assert "-".join(name.split()) == model.product  # GFD's product label is NVML's name, blanks as '-'
        for profile in model.mig.profiles if model.mig else ():
            info = dra.gi_profile(model, profile.name)
            assert info.multiprocessors > 0 and info.copy_engines >= profile.compute, (model.name, profile.name)
            assert info.memory_mib > 0
    assert dra.gi_profile(get_gpu("a30"), "2g.12gb+me").id == 6
    with pytest.raises(KeyError):
        dra.gi_profile(get_gpu("a100-40gb"), "3g.40gb")


def test_architecture_and_versions() -> None:
    assert attrs(dra.render_gpu_device("n", get_gpu("l40s"), 0))["architecture"] == "Ada Lovelace"
    assert attrs(dra.render_gpu_device("n", get_gpu("b200"), 0))["cudaComputeCapability"] == "10.0.0"
    assert capacity(dra.render_gpu_device("n", get_gpu("a10g"), 0)) == {"memory": "23028Mi"}
