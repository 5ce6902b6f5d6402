"""The sim's MIG manager (gpuctl/simulator/mig_manager.py): its answers are mig-parted's, through
upstreamcheck mig-apply, and the resources it advertises are the instances that apply made."""

from __future__ import annotations

from pathlib import Path

import pytest

from gpuctl.model.catalog import GPUS
from gpuctl.simulator.mig_manager import MigApplied, apply_mig_config, mig_resources
from gpuctl.tools import gobuild
from gpuctl.tools.installer import ensure_tools, find_tool
from gpuctl.util.errors import UsageError

pytestmark = pytest.mark.conformance  # builds a Go program of upstream code (the Go toolchain, once per version)

CONFIG = """version: v1
mig-configs:
  custom-3g.20gb-2x2g.10gb:
  - {devices: all, mig-enabled: true, mig-devices: {3g.20gb: 1, 2g.10gb: 2}}
  crowded:
  - {devices: all, mig-enabled: true, mig-devices: {3g.20gb: 2, 1g.5gb: 1}}
  no-such-profile:
  - {devices: all, mig-enabled: true, mig-devices: {2g.20gb: 1}}
  all-disabled:
  - {devices: all, mig-enabled: false}
"""


@pytest.fixture(scope="module")
def upstreamcheck() -> Path:
    if (cached := find_tool("upstreamcheck")) is not None:
        return cached
    go, why = gobuild.go_toolchain()
    if go is None:
        pytest.skip(f"upstreamcheck is built with Go: {why}")
    return ensure_tools(["upstreamcheck"])[0].path


def test_a_layout_that_fits_advertises_the_instances_mig_parted_made(upstreamcheck: Path) -> None:
    made = apply_mig_config(upstreamcheck, CONFIG, "custom-3g.20gb-2x2g.10gb", GPUS["a100-40gb"], 2)
    assert made == MigApplied(({"3g.20gb": 1, "2g.10gb": 2}, {"3g.20gb": 1, "2g.10gb": 2}))
    assert mig_resources(made, "mixed") == {"nvidia.com/gpu": 0, "nvidia.com/mig-3g.20gb": 2,
                                            "nvidia.com/mig-2g.10gb": 4}
    with pytest.raises(UsageError, match="single needs one profile per GPU"):
        mig_resources(made, "single")


def test_mig_parted_decides_failed_and_empty(upstreamcheck: Path) -> None:
    crowded = apply_mig_config(upstreamcheck, CONFIG, "crowded", GPUS["a100-40gb"], 2)
    assert crowded.error is not None and crowded.error.endswith("all orderings failed")
    # mig-parted v0.14.4 applies nothing for a profile the GPU lacks, and says success (gpuctl refuses it first)
    empty = apply_mig_config(upstreamcheck, CONFIG, "no-such-profile", GPUS["a100-40gb"], 1)
    assert empty == MigApplied(({},)) and mig_resources(empty, "mixed") == {"nvidia.com/gpu": 0}
    off = apply_mig_config(upstreamcheck, CONFIG, "all-disabled", GPUS["a100-40gb"], 4)
    assert off == MigApplied((None,) * 4) and mig_resources(off, "mixed") == {"nvidia.com/gpu": 4}


def test_without_the_tool_or_a_config_the_apply_fails() -> None:
    assert apply_mig_config(None, CONFIG, "all-disabled", GPUS["a100-40gb"], 1).error == \
        "upstreamcheck is not installed: run 'gpuctl sim install'"
    assert not apply_mig_config(None, "", "all-disabled", GPUS["a100-40gb"], 1).ok
    assert apply_mig_config(None, CONFIG, "all-disabled", GPUS["t4"], 1).error == "t4 is not MIG-capable"
