"""upstreamcheck, gpuctl's checker built on the upstream Go code (gpuctl/tools/upstreamcheck):
what the device plugin, its config-manager and mig-parted accept and refuse, and go-nvml's
mock MIG placements. The first run builds it through the Go module proxy (about a minute)."""

from __future__ import annotations

import json
import re
import subprocess
from pathlib import Path
from typing import Any

import pytest

from gpuctl.tools import gobuild
from gpuctl.tools.installer import ensure_tools, find_tool
from gpuctl.tools.pins import SIM_TOOLS, TOOLS
from gpuctl.util.errors import ToolError

pytestmark = pytest.mark.conformance  # builds a Go program of upstream code (the Go toolchain, once per version)

SOURCE = gobuild.UPSTREAMCHECK_SOURCE


@pytest.fixture(scope="session")
def upstreamcheck() -> Path:
    if (cached := find_tool("upstreamcheck")) is not None:  # the cache first: built before, Go or not
        return cached
    go, why = gobuild.go_toolchain()
    if go is None:
        pytest.skip(f"upstreamcheck is built with Go: {why}")
    [tool] = ensure_tools(["upstreamcheck"], progress=print)
    return tool.path


def check(binary: Path, *args: str) -> tuple[int, Any, str]:  # out: the JSON answer, None on a refusal
    proc = subprocess.run([str(binary), *args], capture_output=True, text=True, timeout=60)
    out = json.loads(proc.stdout) if proc.returncode == 0 else None
    return proc.returncode, out, proc.stderr


def refusal(binary: Path, *args: str) -> str:
    code, _, err = check(binary, *args)
    assert code == 1, err
    assert err.count("\n") == 1, err  # one line
    return err.strip()


def write_configs(directory: Path, **configs: str) -> Path:
    directory.mkdir(exist_ok=True)
    for key, text in configs.items():
        (directory / key).write_text(text)
    return directory


def sharing(strategy: str, replicas: int, extra: str = "") -> str:
    return (f"version: v1\n{extra}sharing:\n  {strategy}:\n    resources:\n"
            f"    - name: nvidia.com/gpu\n      replicas: {replicas}\n")


def test_pinned_version_is_the_source_constant() -> None:
    main_go = (SOURCE / "main.go").read_text()
    assert f'const Version = "{TOOLS["upstreamcheck"].version}"' in main_go
    assert TOOLS["upstreamcheck"].url is None and "upstreamcheck" in SIM_TOOLS  # the sim's device plugin uses it
    assert (SOURCE / "go.sum").is_file()


def test_without_go_it_says_there_is_no_download(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.setenv("GPUCTL_CACHE_DIR", str(tmp_path / "cache"))
    monkeypatch.setenv("PATH", str(tmp_path / "bin"))
    with pytest.raises(ToolError) as err:
        ensure_tools(["upstreamcheck"])
    line = err.value.one_line()
    version = TOOLS["upstreamcheck"].version
    assert f"upstreamcheck {version} (no release download; gpuctl builds it from its own Go source)" in line
    assert "no Go toolchain on PATH" in line


def test_reports_the_upstream_versions_of_its_go_mod(upstreamcheck: Path) -> None:
    code, out, _ = check(upstreamcheck, "version")
    go_mod = (SOURCE / "go.mod").read_text()
    for key, module in [("k8s-device-plugin", "k8s-device-plugin"), ("mig-parted", "mig-parted"),
                        ("go-nvml", "go-nvml")]:
        assert re.search(rf"github.com/NVIDIA/{module} {re.escape(out[key])}\n", go_mod), key
    assert out["source"] == TOOLS["upstreamcheck"].version


def test_time_slicing_config_loads_with_its_replicas(upstreamcheck: Path, tmp_path: Path) -> None:
    configs = write_configs(tmp_path / "cm", ts4=sharing("timeSlicing", 4, "flags:\n  migStrategy: mixed\n"))
    code, out, err = check(upstreamcheck, "plugin-config", "--dir", str(configs), "--node-config", "ts4",
                           "--mig-strategy", "single")
    assert code == 0, err
    assert out["selected"] == "ts4"
    assert out["migStrategy"] == "single"  # the operator's MIG_STRATEGY env beats the file's flag
    assert out["sharing"]["strategy"] == "time-slicing"
    assert [(r["name"], r["replicas"], r["devices"]) for r in out["sharing"]["resources"]] == [
        ("nvidia.com/gpu", 4, "all")]


def test_default_key_and_empty_fallback(upstreamcheck: Path, tmp_path: Path) -> None:
    configs = write_configs(tmp_path / "cm", ts4=sharing("timeSlicing", 4))
    code, out, _ = check(upstreamcheck, "plugin-config", "--dir", str(configs), "--default", "ts4",
                         "--mig-strategy", "none")
    assert code == 0 and out["selected"] == "ts4"
    code, out, _ = check(upstreamcheck, "plugin-config", "--dir", str(configs), "--mig-strategy", "none")
    assert code == 0 and out["selected"] == "" and out["sharing"]["strategy"] == "none"
    assert refusal(upstreamcheck, "plugin-config", "--dir", str(configs), "--node-config", "t4",
                   "--mig-strategy", "none") == "specified config t4 does not exist"


def test_mps_with_mixed_mig_strategy_is_refused(upstreamcheck: Path, tmp_path: Path) -> None:
    configs = write_configs(tmp_path / "cm", mps=sharing("mps", 4))
    line = refusal(upstreamcheck, "plugin-config", "--dir", str(configs), "--node-config", "mps",
                   "--mig-strategy", "mixed")
    assert line.endswith("using --mig-strategy=mixed is not supported with MPS")


def test_mps_limits(upstreamcheck: Path, tmp_path: Path) -> None:
    configs = write_configs(tmp_path / "cm", mps4=sharing("mps", 4), mps49=sharing("mps", 49))
    base = ["plugin-config", "--dir", str(configs), "--mig-strategy", "single"]
    assert refusal(upstreamcheck, *base, "--node-config", "mps4", "--mig-enabled").endswith(
        "sharing using MPS is not supported for MIG devices")
    assert refusal(upstreamcheck, *base, "--node-config", "mps49", "--compute-capability", "8.0").endswith(
        "maximum allowed replicas exceeded: 49 > 48")
    code, out, _ = check(upstreamcheck, *base, "--node-config", "mps4", "--compute-capability", "7.0")
    assert code == 0 and out["sharing"]["failRequestsGreaterThanOne"] is True


def test_one_replica_is_refused(upstreamcheck: Path, tmp_path: Path) -> None:
    configs = write_configs(tmp_path / "cm", one=sharing("timeSlicing", 1))
    line = refusal(upstreamcheck, "plugin-config", "--dir", str(configs), "--node-config", "one",
                   "--mig-strategy", "none")
    assert line.endswith("number of replicas must be >= 2")


def test_empty_configmap_is_refused(upstreamcheck: Path, tmp_path: Path) -> None:
    (tmp_path / "empty").mkdir()
    (tmp_path / "empty" / "..data").mkdir()  # a ConfigMap volume's own entries are not configs
    assert refusal(upstreamcheck, "plugin-config", "--dir", str(tmp_path / "empty"),
                   "--mig-strategy", "none") == "no configuration files available"


def test_usage_errors_exit_2(upstreamcheck: Path, tmp_path: Path) -> None:
    assert check(upstreamcheck, "plugin-config", "--dir", str(tmp_path), "--mig-strategy", "some")[0] == 2
    assert check(upstreamcheck, "frobnicate")[0] == 2


MIG_PARTED = """version: v1
mig-configs:
  all-disabled:
    - devices: all
      mig-enabled: false
  custom:
    - devices: [0, 1]
      mig-enabled: true
      mig-devices:
        "3g.20gb": 1
        "1g.5gb": 4
"""


def test_mig_parted_config_parses(upstreamcheck: Path, tmp_path: Path) -> None:
    (tmp_path / "config.yaml").write_text(MIG_PARTED)
    code, out, err = check(upstreamcheck, "mig-parted", "--file", str(tmp_path / "config.yaml"))
    assert code == 0, err
    assert out["configs"] == {
        "all-disabled": [{"devices": "all", "mig-enabled": False, "mig-devices": {}}],
        "custom": [{"devices": [0, 1], "mig-enabled": True, "mig-devices": {"3g.20gb": 1, "1g.5gb": 4}}],
    }


def test_malformed_mig_parted_config_is_refused(upstreamcheck: Path, tmp_path: Path) -> None:
    (tmp_path / "bad.yaml").write_text("version: v1\nmig-configs:\n  on:\n  - devices: all\n    mig-enabled: true\n")
    line = refusal(upstreamcheck, "mig-parted", "--file", str(tmp_path / "bad.yaml"))
    assert line.startswith("error parsing config file: ")
    assert line.endswith("missing required field 'mig-devices' when 'mig-enabled' is true")


def test_a100_40gb_placements(upstreamcheck: Path) -> None:
    code, out, err = check(upstreamcheck, "mig-placements", "--gpu", "a100-40gb")
    assert code == 0, err
    starts = {p["name"]: [pl["start"] for pl in p["placements"]] for p in out["profiles"]}
    assert starts["3g.20gb"] == [0, 4]
    assert starts["1g.5gb"] == list(range(7))
    assert {"1g.5gb+me", "1g.10gb", "2g.10gb", "4g.20gb", "7g.40gb"} <= set(starts)


def test_mig_apply_makes_the_instances_on_the_gpus_the_config_names(upstreamcheck: Path, tmp_path: Path) -> None:
    (tmp_path / "config.yaml").write_text(MIG_PARTED)
    code, out, err = check(upstreamcheck, "mig-apply", "--file", str(tmp_path / "config.yaml"), "--config", "custom",
                           "--gpu", "a100-40gb", "--gpus", "3")
    assert code == 0, err
    assert [(g["index"], g["mig-enabled"], g["mig-devices"]) for g in out["gpus"]] == [
        (0, True, {"3g.20gb": 1, "1g.5gb": 4}), (1, True, {"3g.20gb": 1, "1g.5gb": 4}), (2, False, {})]
    # mig-parted tries the widest first; 3g.20gb at 0 leaves no room for four 1g.5gb, so another order wins
    assert [(p["profile"], p["start"], p["size"]) for p in out["gpus"][0]["placements"]] == [
        ("1g.5gb", 0, 1), ("1g.5gb", 1, 1), ("1g.5gb", 2, 1), ("1g.5gb", 3, 1), ("3g.20gb", 4, 4)]


def test_mig_apply_refuses_what_does_not_fit_with_mig_parteds_error(upstreamcheck: Path, tmp_path: Path) -> None:
    (tmp_path / "config.yaml").write_text(
        "version: v1\nmig-configs:\n  too-many:\n  - devices: all\n    mig-enabled: true\n"
        "    mig-devices: {3g.20gb: 2, 1g.5gb: 1}\n")
    base = ["mig-apply", "--file", str(tmp_path / "config.yaml"), "--gpu", "a100-40gb"]
    assert refusal(upstreamcheck, *base, "--config", "too-many") == (
        "error applying MIG configuration with hooks: error setting MIGConfig: "
        "error attempting multiple config orderings: all orderings failed")
    assert refusal(upstreamcheck, *base, "--config", "other") == \
        "error selecting MIG config: selected mig-config not present: other"
    assert check(upstreamcheck, *base)[0] == 2  # --config is required
    assert check(upstreamcheck, "mig-apply", "--file", str(tmp_path / "config.yaml"), "--config", "too-many",
                 "--gpu", "h200")[0] == 2  # no usable go-nvml mock: a usage error, not an answer
