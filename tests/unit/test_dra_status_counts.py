"""`gpuctl status` in DRA mode: devices from the driver's ResourceSlices, allocations from ResourceClaims
(gpuctl/ops/status.py and its device reader gpuctl/ops/devices.py, pure parts; which slices count:
gpuctl/model/dra.py, shared with the quota warning)."""

from __future__ import annotations

from typing import Any

import pytest

from gpuctl.kube.kube import Kube
from gpuctl.model import dra as model_dra
from gpuctl.model.catalog import get_gpu
from gpuctl.model.mig import parse_layout
from gpuctl.ops import devices, status
from gpuctl.ops.tenancy import tenant_claims
from gpuctl.simulator import dra


def a_slice(node: str, devices: list[str], generation: int = 1, count: int = 1, driver: str = "gpu.nvidia.com",
            kind: str = "gpu") -> dict[str, Any]:
    return {"spec": {"driver": driver, "nodeName": node,
                     "pool": {"name": node, "generation": generation, "resourceSliceCount": count},
                     "devices": [{"name": d, "attributes": {"type": {"string": kind}}} for d in devices]}}


def a_claim(*results: tuple[str, str], driver: str = "gpu.nvidia.com", admin: bool = False) -> dict[str, Any]:
    found = [{"request": "gpu", "driver": driver, "pool": pool, "device": device, **({"adminAccess": True} if admin
                                                                                     else {})}
             for pool, device in results]
    return {"status": {"allocation": {"devices": {"results": found}}}}


def test_devices_per_node_from_the_newest_complete_generation() -> None:
    slices = [a_slice("a", ["gpu-0", "gpu-1"]),
              a_slice("b", ["gpu-0"], generation=1), a_slice("b", ["gpu-0", "gpu-1", "gpu-2"], generation=2),
              a_slice("c", ["gpu-0"], generation=3, count=2),  # the pool's second slice is not there yet
              a_slice("d", ["eth-0"], driver="net.example.com")]
    devices = model_dra.slice_devices(slices)
    assert {n: [d["name"] for d in ds] for n, ds in devices.items()} == {
        "a": ["gpu-0", "gpu-1"], "b": ["gpu-0", "gpu-1", "gpu-2"]}


def test_a_pool_of_two_slices_counts_both() -> None:
    devices = model_dra.slice_devices([a_slice("a", ["gpu-0"], count=2), a_slice("a", ["gpu-1"], count=2)])
    assert [d["name"] for d in devices["a"]] == ["gpu-0", "gpu-1"]


def test_an_outdated_slice_listed_after_the_newer_one_is_still_outdated() -> None:
    slices = [a_slice("a", ["gpu-0", "gpu-1"], generation=2), a_slice("a", ["gpu-0"], generation=1)]
    assert [d["name"] for d in model_dra.slice_devices(slices)["a"]] == ["gpu-0", "gpu-1"]


def test_the_quota_warning_counts_the_devices_status_counts(monkeypatch: pytest.MonkeyPatch) -> None:
    """An outdated generation and an incomplete pool: the scheduler allocates from neither, so neither `gpuctl
    status` nor the over-allocation warning of `tenant add` (published_devices, which used to count every
    slice: 6 GPUs here) counts them."""
    slices = [a_slice("a", ["gpu-0", "gpu-1"], generation=1),  # outdated by generation 2
              a_slice("a", ["gpu-0", "gpu-1"], generation=2),
              a_slice("b", ["gpu-0", "gpu-1"], generation=1, count=2)]  # its second slice is not published yet
    monkeypatch.setattr(tenant_claims, "list_slices", lambda client: slices)  # the name tenant_claims reads
    assert {n: len(ds) for n, ds in model_dra.slice_devices(slices).items()} == {"a": 2}
    assert tenant_claims.published_devices(Kube(None)) == {
        "nvidia.com/gpu": 2, model_dra.quota_key(model_dra.GPU_CLASS): 2}


def test_the_quota_warning_counts_mig_devices_per_class_and_profile() -> None:
    model = get_gpu("a100-40gb")
    devices = dra.render_devices("n", model, 2, parse_layout("3g.20gb-2x2g.10gb", model))
    assert tenant_claims.device_totals(devices) == {model_dra.quota_key(model_dra.MIG_CLASS): 6,
                                                    "nvidia.com/mig-3g.20gb": 2, "nvidia.com/mig-2g.10gb": 4,
                                                    # gpuctl's class of each profile (the quota's MIG keys)
                                                    model_dra.quota_key("mig-3g.20gb.gpuctl.dev"): 2,
                                                    model_dra.quota_key("mig-2g.10gb.gpuctl.dev"): 4}


def test_allocations_per_pool_of_the_gpu_driver_only() -> None:
    claims = [a_claim(("a", "gpu-0"), ("a", "gpu-1")), a_claim(("b", "gpu-3")), {"status": {}}, {},
              a_claim(("a", "gpu-0")),  # the same device twice (a shared claim is one allocation)
              a_claim(("a", "gpu-5"), admin=True),  # admin access holds no device
              a_claim(("a", "eth-0"), driver="net.example.com")]
    assert devices.claim_allocations(claims) == {"a": {"gpu-0", "gpu-1"}, "b": {"gpu-3"}}


def test_free_counts_only_published_devices() -> None:
    node = devices.NodeDevices(tuple(a_slice("a", ["gpu-0", "gpu-1", "gpu-2"])["spec"]["devices"]),
                              frozenset({"gpu-1", "gpu-9"}))  # gpu-9: an allocation its device outlived
    assert (len(node.devices), node.in_use, node.free) == (3, 1, 2)


def test_mig_only_from_the_device_type() -> None:
    model = get_gpu("a100-40gb")
    mig = devices.NodeDevices(tuple(dra.render_devices("n", model, 2, parse_layout("3g.20gb-2x2g.10gb", model))),
                             frozenset())
    full = devices.NodeDevices(tuple(dra.render_devices("n", model, 2)), frozenset())
    assert mig.mig_only and not full.mig_only
    assert not devices.NodeDevices((), frozenset()).mig_only
    assert {devices.device_type(d) for d in mig.devices} == {"mig"}


def test_table_columns_follow_the_mode() -> None:
    assert status.status_columns([]) == status.COLUMNS
    assert status.status_columns([{"node": "a", "allocatable": {}, "served_by": "device-plugin"}]) == status.COLUMNS
    columns = status.status_columns([{"node": "a", "devices": 8, "allocated": 1, "free": 7, "served_by": "dra"}])
    assert columns == status.DRA_COLUMNS
    assert {"devices", "allocated", "free", "kubelet_plugin"} <= set(columns)
    assert not {"allocatable", "sharing", "replicas", "device_plugin"} & set(columns)
