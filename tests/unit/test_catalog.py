import json
from pathlib import Path

import pytest

from gpuctl.model.catalog import GPUS, MigGeometry, MigProfile, get_gpu
from gpuctl.util.errors import ExitCode, UsageError


def geometry(gpu: str) -> MigGeometry:
    geo = GPUS[gpu].mig
    assert geo is not None, gpu
    return geo


def profile(geo: MigGeometry, name: str) -> MigProfile:
    found = geo.profile(name)
    assert found is not None, name
    return found


MIG_GPUS = {"a30", "a100-40gb", "a100-80gb", "h100-80gb", "h200", "b200"}


def test_catalog_has_every_supported_gpu() -> None:
    assert set(GPUS) == {"t4", "a10g", "l4", "l40s", "a30", "a100-40gb", "a100-80gb", "h100-80gb", "h200", "b200"}


def test_only_datacenter_ampere_hopper_blackwell_have_mig() -> None:
    assert {name for name, m in GPUS.items() if m.mig_capable} == MIG_GPUS
    assert all(GPUS[n].family in ("ampere", "hopper", "blackwell") for n in MIG_GPUS)


@pytest.mark.parametrize("name", sorted(MIG_GPUS))
def test_mig_profiles_fit_their_gpu(name: str) -> None:
    geo = GPUS[name].mig
    assert geo is not None
    for profile in geo.profiles:
        assert 1 <= profile.compute <= geo.compute_slices
        assert all(0 <= s and s + profile.width <= geo.memory_slots for s in profile.starts), profile
    assert all(geo.profile(p) is not None for p in geo.balanced)
    full = max(geo.profiles, key=lambda p: p.compute)
    assert full.compute == geo.compute_slices and full.width == geo.memory_slots


def test_a100_40gb_geometry_matches_nvidia_table() -> None:
    geo = GPUS["a100-40gb"].mig
    assert geo is not None
    assert [p.name for p in geo.profiles] == ["1g.5gb", "1g.5gb+me", "1g.10gb", "2g.10gb", "3g.20gb", "4g.20gb", "7g.40gb"]
    assert profile(geo, "1g.5gb").starts == (0, 1, 2, 3, 4, 5, 6)  # never slot 7
    assert profile(geo, "2g.10gb").starts == (0, 2, 4)  # never slot 6
    assert profile(geo, "3g.20gb").starts == (0, 4)
    assert geo.balanced == ("1g.5gb", "1g.5gb", "2g.10gb", "3g.20gb")


def test_h200_and_a30_profile_names() -> None:
    assert geometry("h200").profile("3g.71gb") is not None
    a30 = geometry("a30")
    assert (a30.compute_slices, a30.memory_slots) == (4, 4)
    assert profile(a30, "4g.24gb").width == 4


def test_products_and_instance_types() -> None:
    assert GPUS["t4"].product == "Tesla-T4"
    assert GPUS["a100-40gb"].product == "NVIDIA-A100-SXM4-40GB"
    assert GPUS["t4"].openstack_flavor == "g2.5xlarge"
    instance_type = GPUS["a100-40gb"].default_instance_type
    assert instance_type is not None and instance_type.name == "p4d.24xlarge"
    assert instance_type.gpus == GPUS["a100-40gb"].default_gpus_per_node == 8
    assert {t.name for t in GPUS["h200"].instance_types} == {"p5e.48xlarge", "p5en.48xlarge"}
    assert all(m.instance_types for n, m in GPUS.items() if n != "a30")


def test_get_gpu_is_case_insensitive_and_names_the_field() -> None:
    assert get_gpu("A100-40GB").name == "a100-40gb"
    with pytest.raises(UsageError) as err:
        get_gpu("z100", "nodeGroups[0].gpu")
    assert err.value.exit_code == ExitCode.USAGE
    assert err.value.one_line().startswith("nodeGroups[0].gpu: unknown GPU 'z100'; use one of: t4,")


UPSTREAM_TYPES = Path(__file__).parents[3] / "shared/upstream/karpenter-provider-aws-v1.14.1/instance-types-gpu.json"


@pytest.mark.parametrize("gpu", [m.name for m in GPUS.values() if m.instance_types])
def test_instance_types_are_karpenters(gpu: str) -> None:
    """Each EC2 type's GPUs, vCPUs, memory and pod limit are Karpenter's own figures for it, and so are the GPU
    name and memory per GPU the model's NodePools select on."""
    upstream = json.loads(UPSTREAM_TYPES.read_text())
    model = get_gpu(gpu)
    for t in model.instance_types:
        labels = upstream[t.name]
        assert (t.gpus, t.cpu, t.memory_mib, t.pods) == (
            int(labels["karpenter.k8s.aws/instance-gpu-count"]), int(labels["karpenter.k8s.aws/instance-cpu"]),
            int(labels["karpenter.k8s.aws/instance-memory"]), int(labels["pods"])), t.name
        assert labels["karpenter.k8s.aws/instance-gpu-name"] == model.karpenter_name
        assert int(labels["karpenter.k8s.aws/instance-gpu-memory"]) == model.karpenter_memory_mib
        assert labels["karpenter.k8s.aws/instance-gpu-manufacturer"] == "nvidia"
        assert t.price is None or 0 < t.price < 200
