"""The catalog's GPUs and the NVML figures the sim's DRA driver publishes, against what real GPUs said of
themselves (tests/readings: NVML and nvidia-smi on a lent H100 and H200, MIG mode off): the device name and
memory, the compute capability, and each MIG profile's ID, count, slices, placements and engine counts."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from gpuctl.model.catalog import get_gpu, nvml_name
from gpuctl.simulator import dra

READINGS = sorted((Path(__file__).parents[1] / "readings").glob("nvidia-smi-*.txt"))
PROFILE = re.compile(r"^nvmlDeviceGetGpuInstanceProfileInfo\(\d+\): (.*)$", re.M)
PLACEMENTS = re.compile(r"^GPU +0 Profile ID +(\d+) Placements? *: \{([\d,]+)\}:(\d+)$", re.M)


def _value(text: str, key: str) -> str:
    match = re.search(rf"^{re.escape(key)}: (.*)$", text, re.M)
    assert match is not None, key
    return match.group(1)


def test_there_are_readings() -> None:
    assert [p.name for p in READINGS] == ["nvidia-smi-h100-80gb.txt", "nvidia-smi-h200.txt"]


@pytest.mark.parametrize("reading", READINGS, ids=lambda p: p.stem)
def test_the_catalog_and_the_sims_nvml_figures_are_the_gpus_own(reading: Path) -> None:
    text = reading.read_text()
    model = get_gpu(reading.stem.removeprefix("nvidia-smi-"))
    assert nvml_name(model) == _value(text, "nvmlDeviceGetName")
    assert int(_value(text, "nvmlDeviceGetMemoryInfo.total")) == model.memory_mib << 20
    assert ".".join(map(str, model.compute_capability)) == _value(text, "nvmlDeviceGetCudaComputeCapability")
    placements = {int(i): (tuple(int(s) for s in starts.split(",")), int(width))
                  for i, starts, width in PLACEMENTS.findall(text)}
    read = {}
    for line in PROFILE.findall(text):
        fields = dict(f.split("=", 1) for f in line.split())
        name = fields.pop("name")
        read[name] = {k: int(v) for k, v in fields.items()}
    assert model.mig is not None
    assert {p.name for p in model.mig.profiles} == set(read)
    for profile in model.mig.profiles:
        nvml, info = read[profile.name], dra.gi_profile(model, profile.name)
        assert (info.id, info.multiprocessors, info.copy_engines, info.decoders, info.encoders, info.jpeg_engines,
                info.ofa_engines, info.memory_mib) == \
            (nvml["id"], nvml["multiprocessorCount"], nvml["copyEngineCount"], nvml["decoderCount"],
             nvml["encoderCount"], nvml["jpegCount"], nvml["ofaCount"], nvml["memorySizeMB"]), profile.name
        assert (profile.compute, profile.max_count) == (nvml["sliceCount"], nvml["instanceCount"]), profile.name
        assert (profile.starts, profile.width) == placements[info.id], profile.name
