"""gpuctl's MIG geometry and the configs it writes, against NVIDIA's own Go code through upstreamcheck
(built from the Go module proxy: k8s-device-plugin v0.19.3, mig-parted v0.14.4, go-nvml v0.13.3-1;
`upstreamcheck version` prints them). The operator v26.7.0 ships device plugin v0.20.0 and MIG manager
v0.15.0, which the proxy does not serve; their differences are listed in docs/testing.md."""

from __future__ import annotations

import json
import re
import subprocess
from collections import Counter
from pathlib import Path

import pytest

from tests.support.model import (
    DEFAULT_CONFIG_KEY,
    GPUS,
    Sharing,
    config_name,
    mig_parted_config,
    parse_layout,
    place,
    plugin_configs,
)
from tests.support.tools import ensure_tools, find_tool
from tests.support.util import UsageError

pytestmark = pytest.mark.conformance  # builds a Go program of upstream code (the Go toolchain, once per version)

@pytest.fixture(scope="module")
def upstreamcheck() -> Path:
    return find_tool("upstreamcheck") or ensure_tools(["upstreamcheck"])[0].path


def run(tool: Path, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([str(tool), *args], capture_output=True, text=True, timeout=60)


@pytest.mark.parametrize("gpu", ["a100-40gb", "a100-80gb", "a30"])
def test_catalog_geometry_matches_go_nvml_placements(upstreamcheck: Path, gpu: str) -> None:
    """Every MIG profile gpuctl knows starts where, and is as wide as, go-nvml's mock GPU says
    (the H100/H200/B200 mocks model 7 memory slots, unlike NVIDIA's MIG user guide: not compared)."""
    proc = run(upstreamcheck, "mig-placements", "--gpu", gpu)
    assert proc.returncode == 0, proc.stderr
    mock = {p["name"]: p for p in json.loads(proc.stdout)["profiles"]}
    geometry = GPUS[gpu].mig
    assert geometry is not None
    for profile in geometry.profiles:
        placements = mock[profile.name]["placements"]
        assert tuple(p["start"] for p in placements) == profile.starts, profile.name
        assert {p["size"] for p in placements} == {profile.width}, profile.name


def test_mig_parted_reads_the_configs_gpuctl_writes(upstreamcheck: Path, tmp_path: Path) -> None:
    a100 = GPUS["a100-40gb"]
    layouts = [parse_layout(text, a100) for text in ("3g.20gb-2x2g.10gb", "all-1g.5gb", "all-balanced")]
    config = tmp_path / "config.yaml"
    config.write_text(mig_parted_config(layouts, {}))
    proc = run(upstreamcheck, "mig-parted", "--file", str(config))
    assert proc.returncode == 0, proc.stderr
    configs = json.loads(proc.stdout)["configs"]
    assert configs["all-disabled"][0]["mig-enabled"] is False
    for layout in layouts:
        [entry] = configs[config_name(layout)]
        assert entry["mig-enabled"] is True and entry["mig-devices"] == dict(Counter(layout.profiles))


@pytest.mark.parametrize("strategy,sharing,node_config", [
    ("mixed", Sharing("time-slicing", 4), "slice-4"),
    ("single", Sharing("mps", 4), "mps-4"),
    ("mixed", Sharing("time-slicing", 4), ""),  # an unlabelled node gets the default: no sharing
])
def test_the_device_plugin_loads_the_configs_gpuctl_writes(upstreamcheck: Path, tmp_path: Path, strategy: str,
                                                           sharing: Sharing, node_config: str) -> None:
    for key, text in plugin_configs([sharing]).items():
        (tmp_path / key).write_text(text)
    args = ["plugin-config", "--dir", str(tmp_path), "--mig-strategy", strategy, "--default", DEFAULT_CONFIG_KEY,
            "--compute-capability", "7.5"]
    proc = run(upstreamcheck, *args, *(["--node-config", node_config] if node_config else []))
    assert proc.returncode == 0, proc.stderr
    loaded = json.loads(proc.stdout)
    assert loaded["selected"] == (node_config or DEFAULT_CONFIG_KEY)
    if node_config:
        assert loaded["sharing"]["strategy"] == sharing.strategy
        assert [r["replicas"] for r in loaded["sharing"]["resources"]] == [sharing.replicas]
    else:
        assert loaded["sharing"]["strategy"] == "none"


def test_the_device_plugin_refuses_what_gpuctl_refuses(upstreamcheck: Path, tmp_path: Path) -> None:
    """The rules gpuctl checks before any write are the plugin's: MPS under mixed, too many MPS clients."""
    for key, text in plugin_configs([Sharing("mps", 49)]).items():
        (tmp_path / key).write_text(text)
    base = ["plugin-config", "--dir", str(tmp_path), "--node-config", "mps-49", "--compute-capability", "7.5"]
    mixed = run(upstreamcheck, *base, "--mig-strategy", "mixed")
    assert mixed.returncode == 1 and "using --mig-strategy=mixed is not supported with MPS" in mixed.stderr
    too_many = run(upstreamcheck, *base, "--mig-strategy", "single")
    assert too_many.returncode == 1 and "maximum allowed replicas exceeded: 49 > 48" in too_many.stderr


# Every MIG layout tests/integration gives a sim node (test_every_integration_layout_is_listed keeps this whole),
# with the GPU model it is given on. gpuctl checks a layout before writing any label (gpuctl.model.mig); the sim's
# MIG manager then applies it with mig-parted's own code (gpuctl/simulator/mig_manager.py).
INTEGRATION_LAYOUTS = {
    ("a100-40gb", "3g.20gb-2x2g.10gb"): {"3g.20gb": 1, "2g.10gb": 2},
    ("a100-40gb", "all-balanced"): {"3g.20gb": 1, "2g.10gb": 1, "1g.5gb": 2},
    ("a100-40gb", "all-disabled"): None,
    ("a100-40gb", "all-1g.5gb"): {"1g.5gb": 7},  # test_doctor_mig: a label naming no config of the node's group
    ("a100-40gb", "3g.20gb-3g.20gb-1g.5gb"): {"3g.20gb": 2, "1g.5gb": 1},  # refused: no memory slot left
    ("a100-40gb", "4x2g.10gb"): {"2g.10gb": 4},  # refused: at most 3
    ("a100-40gb", "2g.20gb"): {"2g.20gb": 1},  # refused: no such profile on a 40 GB A100
}
LAYOUT_TEXT = re.compile(r"""["'{ :]((?:\d+x)?\dg\.\d+gb(?:\+me)?(?:-(?:\d+x)?\dg\.\d+gb(?:\+me)?)+|\d+x\dg\.\d+gb"""
                         r"""|all-(?:balanced|disabled|enabled|\dg\.\d+gb))\b""")


def test_every_integration_layout_is_listed() -> None:
    root = Path(__file__).parents[1] / "integration"
    used = {m for f in root.glob("*.py") for m in LAYOUT_TEXT.findall(f.read_text())}
    assert used, "no MIG layout found in tests/integration: the pattern is stale"
    assert used <= {layout for _, layout in INTEGRATION_LAYOUTS}, used


def mig_parted_apply(tool: Path, tmp_path: Path, config: str, devices: dict[str, int] | None, gpu: str,
                     gpus: int = 2) -> subprocess.CompletedProcess[str]:
    """`upstreamcheck mig-apply` of one config, written as gpuctl writes it (devices: all)."""
    entry = {"devices": "all", "mig-enabled": devices is not None, **({"mig-devices": devices} if devices else {})}
    path = tmp_path / "config.yaml"
    path.write_text(json.dumps({"version": "v1", "mig-configs": {config: [entry]}}))
    return run(tool, "mig-apply", "--file", str(path), "--config", config, "--gpu", gpu, "--gpus", str(gpus))


@pytest.mark.parametrize("gpu,layout", sorted(INTEGRATION_LAYOUTS))
def test_gpuctl_accepts_exactly_the_layouts_mig_parted_makes(upstreamcheck: Path, tmp_path: Path, gpu: str,
                                                            layout: str) -> None:
    """Where gpuctl accepts a layout, mig-parted's apply on go-nvml's mock GPU makes exactly its instances on
    every GPU, where gpuctl's plan puts them; where gpuctl refuses one, mig-parted cannot make it (it fails,
    or, for a profile the GPU does not have, applies nothing and says success: gpuctl is stricter there)."""
    devices = INTEGRATION_LAYOUTS[(gpu, layout)]
    model = GPUS[gpu]
    try:
        parsed = parse_layout(layout, model)
    except UsageError:
        parsed = None
    name = config_name(parsed) if parsed is not None else layout
    proc = mig_parted_apply(upstreamcheck, tmp_path, name, devices, gpu)
    if parsed is None:
        made = [g["mig-devices"] for g in json.loads(proc.stdout)["gpus"]] if proc.returncode == 0 else []
        assert proc.returncode == 1 or devices not in made, proc.stdout
        return
    assert proc.returncode == 0, proc.stderr
    assert dict(Counter(parsed.profiles)) == (devices or {})
    gpus = json.loads(proc.stdout)["gpus"]
    assert [g["index"] for g in gpus] == [0, 1]
    for applied in gpus:
        assert applied["mig-enabled"] is parsed.enabled
        assert applied["mig-devices"] == (devices or {})
        planned = place(parsed.profiles, model) if parsed.enabled else ()
        assert [(p["profile"], p["start"]) for p in applied["placements"]] == [(p.profile, p.start) for p in planned]
