"""The sim's DCGM exporter's rules (gpuctl/simulator/dcgm_series.py): which device a pod gets, and the series
dcgm-exporter 4.6.0-4.8.3 would serve for it (docs/research/dcgm-exporter.md)."""

from __future__ import annotations

from gpuctl.model.catalog import GPUS
from gpuctl.model.mig import parse_layout
from gpuctl.simulator.dcgm_series import (
    Claim,
    Sample,
    assign,
    claimed_slots,
    instance_id,
    node_devices,
    number,
    pci_bus_id,
    render_samples,
)
from gpuctl.simulator.dra import gpu_uuid, pci_address

DRIVER = "570.172.08"
GPU_LABELS = {"gpu", "UUID", "pci_bus_id", "device", "modelName", "hostname", "DCGM_FI_DRIVER_VERSION"}
POD_LABELS = {"pod", "namespace", "container", "pod_uid"}


def devices(gpu: str, gpus: int, labels: dict[str, str] | None = None, layout: str | None = None):
    model = GPUS[gpu]
    return node_devices("n-0", model, gpus, labels or {}, parse_layout(layout, model) if layout else None,
                        gpu_uuid, pci_address)


def claim(name: str, util: float = 0, memory: float = 0, resource: str = "nvidia.com/gpu", count: int = 1,
          created: str = "") -> Claim:
    return Claim(f"uid-{name}", "default", name, "main", resource, count, util, memory, created or name)


def of(samples: list[Sample], family: str) -> list[Sample]:
    return [s for s in samples if s.family == family]


def test_a_time_sliced_gpu_sums_its_pods_and_has_a_series_per_pod() -> None:
    devs = devices("t4", 1, {"nvidia.com/gpu.replicas": "4"})
    claims = [claim("a", 20, 1024), claim("b", 20, 2048), claim("c", 10, 512)]
    assignment = assign(devs, claims, {})
    assert sorted(r for slots in assignment.values() for _, r in slots) == [0, 1, 2]
    samples = render_samples(devs, claims, assignment, DRIVER)

    util = of(samples, "DCGM_FI_DEV_GPU_UTIL")
    device = [s for s in util if "pod" not in s.labels]
    assert [s.value for s in device] == [50]
    assert set(device[0].labels) == GPU_LABELS
    assert device[0].labels["modelName"] == "Tesla T4" and device[0].labels["hostname"] == "n-0"
    assert device[0].labels["pci_bus_id"] == "00000000:11:00.0" and device[0].labels["device"] == "nvidia0"
    # GPU_UTIL and FB_USED are per-process fields: each pod gets its own value (process_metrics.go, #594)
    assert {s.labels["pod"]: s.value for s in util if "pod" in s.labels} == {"a": 20, "b": 20, "c": 10}
    assert {s.labels["pod"]: s.value for s in of(samples, "DCGM_FI_DEV_FB_USED") if "pod" in s.labels} == \
        {"a": 1024, "b": 2048, "c": 512}
    # every other family: one series per pod with the device's value, none without pod labels (#307, #587)
    engine = of(samples, "DCGM_FI_PROF_GR_ENGINE_ACTIVE")
    assert sorted((s.labels["pod"], s.labels["vgpu"], s.value) for s in engine) == \
        [("a", "0", 0.5), ("b", "1", 0.5), ("c", "2", 0.5)]
    assert all(set(s.labels) == GPU_LABELS | POD_LABELS | {"vgpu"} for s in engine)
    assert {s.value for s in of(samples, "DCGM_FI_DEV_FB_FREE")} == {15360 - 3584}


def test_an_idle_gpu_has_one_series_per_family_without_pod_labels() -> None:
    devs = devices("l4", 2)
    samples = render_samples(devs, [claim("a", 30)], assign(devs, [claim("a", 30)], {}), DRIVER)
    idle = [s for s in samples if s.labels["gpu"] == "1"]
    assert sorted(s.family for s in idle) == ["DCGM_FI_DEV_FB_FREE", "DCGM_FI_DEV_FB_USED", "DCGM_FI_DEV_GPU_UTIL",
                                               "DCGM_FI_DEV_XID_ERRORS", "DCGM_FI_PROF_GR_ENGINE_ACTIVE"]
    assert all(set(s.labels) == GPU_LABELS and s.value in (0, 23034) for s in idle)
    busy = of([s for s in samples if s.labels["gpu"] == "0"], "DCGM_FI_PROF_GR_ENGINE_ACTIVE")
    assert [(s.labels["pod"], s.value) for s in busy] == [("a", 0.3)]
    assert "vgpu" not in busy[0].labels  # a whole GPU's device ID is its UUID alone


def test_pods_over_a_full_gpu_share_it_in_proportion() -> None:
    devs = devices("t4", 1, {"nvidia.com/gpu.replicas": "4"})
    claims = [claim("a", 80, 10000), claim("b", 60, 10000)]
    samples = render_samples(devs, claims, assign(devs, claims, {}), DRIVER)
    util = {s.labels.get("pod", ""): s.value for s in of(samples, "DCGM_FI_DEV_GPU_UTIL")}
    assert util == {"": 100, "a": 57, "b": 43}
    used = {s.labels.get("pod", ""): s.value for s in of(samples, "DCGM_FI_DEV_FB_USED")}
    assert used == {"": 15360, "a": 7680, "b": 7680}
    assert {s.value for s in of(samples, "DCGM_FI_DEV_FB_FREE")} == {0}


def test_replicas_are_spread_over_gpus_and_kept_while_their_pods_run() -> None:
    devs = devices("a10g", 2, {"nvidia.com/gpu.replicas": "2"})
    first = assign(devs, [claim("a"), claim("b"), claim("c")], {})
    where = {key[0]: slots[0] for key, slots in first.items()}
    # distributedAlloc: the GPU with the fewest replicas taken, so b goes to the second GPU
    assert where == {"uid-a": (devs[0].key, 0), "uid-b": (devs[1].key, 0), "uid-c": (devs[0].key, 1)}
    # a leaves, d comes: b and c keep theirs, d takes a's replica
    second = assign(devs, [claim("b"), claim("c"), claim("d", created="0-earliest")], first)
    assert {key[0]: slots[0] for key, slots in second.items()} == \
        {"uid-b": (devs[1].key, 0), "uid-c": (devs[0].key, 1), "uid-d": (devs[0].key, 0)}


def test_whole_gpus_go_one_pod_each_and_a_claim_is_served_in_full_or_not_at_all() -> None:
    devs = devices("a100-40gb", 2)
    result = assign(devs, [claim("two", count=2), claim("late", created="z")], {})
    assert result == {("uid-two", "main", "nvidia.com/gpu"): ((devs[0].key, 0), (devs[1].key, 0))}


def test_mig_instances_serve_their_own_resource_with_their_profile_labels() -> None:
    devs = devices("a100-40gb", 1, layout="3g.20gb-2x2g.10gb")
    assert [(d.profile, d.instance_id, d.memory_mib, d.resource) for d in devs] == [
        ("2g.10gb", 3, 9856, "nvidia.com/mig-2g.10gb"), ("2g.10gb", 4, 9856, "nvidia.com/mig-2g.10gb"),
        ("3g.20gb", 2, 19968, "nvidia.com/mig-3g.20gb")]
    claims = [claim("big", 70, 4096, "nvidia.com/mig-3g.20gb"), claim("small", 40, 0, "nvidia.com/mig-2g.10gb")]
    samples = render_samples(devs, claims, assign(devs, claims, {}), DRIVER)
    assert of(samples, "DCGM_FI_DEV_GPU_UTIL") == []  # not reported for MIG instances (#216, #430)
    engine = {(s.labels["GPU_I_PROFILE"], s.labels["GPU_I_ID"], s.labels.get("pod")): s.value
              for s in of(samples, "DCGM_FI_PROF_GR_ENGINE_ACTIVE")}
    assert engine == {("3g.20gb", "2", "big"): 0.7, ("2g.10gb", "3", "small"): 0.4, ("2g.10gb", "4", None): 0.0}
    assert all(s.labels["UUID"] == devs[0].uuid and s.labels["gpu"] == "0" for s in samples)
    free = {s.labels["GPU_I_ID"]: s.value for s in of(samples, "DCGM_FI_DEV_FB_FREE")}
    assert free == {"2": 19968 - 4096, "3": 9856, "4": 9856}


def test_the_single_strategy_serves_mig_instances_as_nvidia_com_gpu() -> None:
    devs = devices("a100-40gb", 1, {"nvidia.com/mig.strategy": "single"}, layout="all-1g.5gb")
    assert [d.instance_id for d in devs] == [7, 8, 9, 10, 11, 12, 13]
    assert {d.resource for d in devs} == {"nvidia.com/gpu"}
    assert len(assign(devs, [claim(str(i)) for i in range(8)], {})) == 7


def test_values_read_from_annotations_and_pci_ids() -> None:
    assert [number(v, 100) for v in ("20", "12.5", "250", "-3", "abc", "nan", None)] == [20, 12.5, 100, 0, 0, 0, 0]
    assert pci_bus_id("0000:21:00.0") == "00000000:21:00.0"
    assert [instance_id(8, 0, 8), instance_id(8, 4, 4), instance_id(8, 6, 2), instance_id(8, 6, 1)] == [0, 2, 6, 13]
    assert [instance_id(4, 0, 4), instance_id(4, 2, 2), instance_id(4, 3, 1)] == [0, 2, 6]


def resource_claim(name: str, devices: list[tuple[str, str]], pods: list[str], driver: str = "gpu.nvidia.com"):
    return {"metadata": {"name": name, "namespace": "team-a"},
            "status": {"allocation": {"devices": {"results": [
                {"driver": driver, "pool": pool, "device": device, "request": "gpu"} for pool, device in devices]}},
                "reservedFor": [{"resource": "pods", "name": p, "uid": f"uid-{p}"} for p in pods]}}


def running(name: str, util: str, memory: str) -> dict:
    return {"metadata": {"name": name, "namespace": "team-a", "uid": f"uid-{name}",
                         "annotations": {"sim.gpuctl.dev/gpu-utilization": util, "sim.gpuctl.dev/gpu-memory-mib": memory}},
            "spec": {"nodeName": "n-0"}, "status": {"phase": "Running"}}


def test_a_claimed_gpu_carries_its_pods_load_without_pod_labels() -> None:
    devs = devices("a100-40gb", 2)
    assert [d.dra_name for d in devs] == ["gpu-0", "gpu-1"]  # the names the sim's DRA driver publishes
    pods = {p["metadata"]["uid"]: p for p in (running("a", "30", "2048"), running("b", "25", "1024"))}
    claims, assignment = claimed_slots([
        resource_claim("shared", [("n-0", "gpu-1")], ["a", "b"]),  # one claim, two pods: they share gpu-1
        resource_claim("other-driver", [("n-0", "gpu-0")], ["a"], driver="example.com"),
        resource_claim("elsewhere", [("n-9", "gpu-0")], ["a"]),
        resource_claim("gone", [("n-0", "gpu-0")], ["z"])], pods, devs)
    assert sorted((c.pod, c.mapped, slots) for c in claims for slots in [assignment[c.key]]) == \
        [("a", False, ((devs[1].key, 0),)), ("b", False, ((devs[1].key, 0),))]
    samples = render_samples(devs, claims, assignment, DRIVER)
    # the exporter as the GPU Operator deploys it maps no DRA device to pods: the GPU's load, no pod labels
    assert all(set(s.labels) == GPU_LABELS for s in samples)
    by_gpu = {s.labels["gpu"]: s.value for s in of(samples, "DCGM_FI_DEV_GPU_UTIL")}
    assert by_gpu == {"0": 0, "1": 55}
    assert {s.labels["gpu"]: s.value for s in of(samples, "DCGM_FI_DEV_FB_USED")} == {"0": 0, "1": 3072}


def test_claimed_mig_devices_are_named_as_the_driver_publishes_them() -> None:
    devs = devices("a100-40gb", 1, {}, "3g.20gb-2x2g.10gb")
    assert sorted(d.dra_name for d in devs) == ["gpu-0-mig-2g10gb-14-0", "gpu-0-mig-2g10gb-14-2",
                                                "gpu-0-mig-3g20gb-9-4"]
    pods = {"uid-a": running("a", "40", "0")}
    claims, assignment = claimed_slots([resource_claim("c", [("n-0", "gpu-0-mig-2g10gb-14-2")], ["a"])], pods, devs)
    samples = render_samples(devs, claims, assignment, DRIVER)
    busy = {(s.labels["GPU_I_PROFILE"], s.labels["GPU_I_ID"]): s.value
            for s in of(samples, "DCGM_FI_PROF_GR_ENGINE_ACTIVE")}
    assert busy == {("3g.20gb", "2"): 0.0, ("2g.10gb", "3"): 0.0, ("2g.10gb", "4"): 0.4}


def test_an_extended_resource_dra_serves_gets_no_device_plugin_device() -> None:
    """The kubelet allocates no device-plugin device for a container's extended resource that the scheduler's
    DRA claim serves (devicemanager isDRAExtendedResource): the exporter attributes only the claim's device."""
    from gpuctl.simulator.dcgm_exporter import _claims

    def pod(mappings: list[dict[str, str]]) -> dict[str, object]:
        return {"metadata": {"uid": "u1", "namespace": "team", "name": "p"},
                "spec": {"nodeName": "gpu-0", "containers": [
                    {"name": "main", "resources": {"limits": {"nvidia.com/gpu": "1"}}},
                    {"name": "side", "resources": {"limits": {"nvidia.com/gpu": "1"}}}]},
                "status": {"phase": "Running", "extendedResourceClaimStatus": {
                    "resourceClaimName": "p-extended-resources-x", "requestMappings": mappings}}}

    assert [c.container for c in _claims(pod([]))] == ["main", "side"]
    served = [{"containerName": "main", "resourceName": "nvidia.com/gpu", "requestName": "container-0-request-0"}]
    assert [c.container for c in _claims(pod(served))] == ["side"]
