"""The source builds' shared pieces, without Go or network: the -overlay patch tables, the toolchain a
module's go.mod asks for, and the on-demand Karpenter tool's pin."""

from __future__ import annotations

from pathlib import Path

import pytest

from gpuctl.tools.gobuild import KARPENTER_PATCHES, KUEUE_MAIN_PATCHES, RECIPES, apply_patches, needed_toolchain
from gpuctl.tools.pins import KARPENTER_VERSION, ON_DEMAND_TOOLS, SIM_TOOLS, TOOLS
from gpuctl.util.errors import ToolError

WHERE = "kwok/main.go of sigs.k8s.io/karpenter@v1.15.0"


def test_each_patch_replaces_its_one_line() -> None:
    source = "a\n\tctx, op := operator.NewOperator()\nb\n"
    patched = apply_patches(source, (("\tctx, op := operator.NewOperator()\n", "\tX; Y\n"),), WHERE, "T")
    assert patched == "a\n\tX; Y\nb\n"


def test_a_missing_or_doubled_line_stops_the_build_naming_file_and_table() -> None:
    patches = (('\t"github.com/samber/lo"\n', '\t"fmt"; "github.com/samber/lo"\n'),)
    with pytest.raises(ToolError) as missing:
        apply_patches("package main\n", patches, WHERE, "KARPENTER_PATCHES")
    assert missing.value.one_line().startswith(
        f"{WHERE} has 0 lines '\"github.com/samber/lo\"', gpuctl's build patch expects exactly one")
    assert "update KARPENTER_PATCHES in gpuctl/tools/gobuild.py" in missing.value.one_line()
    with pytest.raises(ToolError, match="has 2 lines"):
        apply_patches('\t"github.com/samber/lo"\n' * 2, patches, WHERE, "KARPENTER_PATCHES")


@pytest.mark.parametrize("table", [KUEUE_MAIN_PATCHES, *KARPENTER_PATCHES.values()])
def test_patches_are_whole_lines_and_keep_upstreams_line_numbers(table) -> None:
    for old, new in table:
        assert old.endswith("\n") and new.endswith("\n"), old
        assert old.count("\n") == new.count("\n") == 1, old


def test_karpenter_listens_on_loopback_and_reports_its_version() -> None:
    bind = [new for old, new in KARPENTER_PATCHES["pkg/operator/operator.go"]]
    assert all('fmt.Sprintf("127.0.0.1:%d"' in line for line in bind) and len(bind) == 2
    main = "".join(new for _, new in KARPENTER_PATCHES["kwok/main.go"])
    assert 'fmt.Println("karpenter-kwok", operator.Version)' in main and "os.Exit(0)" in main


@pytest.mark.parametrize(("gomod", "local", "expected"), [
    ("module m\n\ngo 1.26.9\n", "go1.26.8", "go1.26.9"),
    ("module m\n\ngo 1.26.9\n", "go1.26.9", "local"),
    ("module m\n\ngo 1.26.4\n\ntoolchain go1.26.9\n", "go1.26.8", "local"),
    ("module m\n\ngo 1.26\n", "go1.26.0", "local"),
    ("module m\n\ngo 1.27\n", "go1.26.8 X:jsonv2", "go1.27.0"),
    ("module m\n", "go1.26.8", "local"),  # no go line: go 1.16
])
def test_the_toolchain_is_the_modules_go_line_when_newer_than_the_local_go(gomod, local, expected) -> None:
    assert needed_toolchain(gomod, local) == expected


def test_an_unreadable_go_version_is_refused() -> None:
    with pytest.raises(ToolError, match="cannot compare the module's 'go 1.27rc1' with the local go1.26.8"):
        needed_toolchain("module m\n\ngo 1.27rc1\n", "go1.26.8")


def test_karpenter_kwok_is_built_on_demand_with_its_crds() -> None:
    tool = TOOLS["karpenter-kwok"]
    assert (tool.version, tool.recipe, tool.url, tool.extras) == (KARPENTER_VERSION, "karpenter", None,
                                                                  ("karpenter-crds",))
    assert tool.version_args == ("--version",) and tool.recipe in RECIPES
    assert "karpenter-kwok" in ON_DEMAND_TOOLS and "karpenter-kwok" not in SIM_TOOLS
    assert "kueue" in ON_DEMAND_TOOLS and "kueue" not in SIM_TOOLS


def test_prometheus_is_an_on_demand_tool_whose_module_version_is_its_release() -> None:
    from gpuctl.tools.pins import PROMETHEUS_MODULE_VERSION, PROMETHEUS_VERSION

    tool = TOOLS["prometheus"]
    assert tool.version == PROMETHEUS_VERSION and tool.recipe == "prometheus" and tool.recipe in RECIPES
    assert "prometheus" in ON_DEMAND_TOOLS and "prometheus" not in SIM_TOOLS
    # github.com/prometheus/prometheus tags release v3.X.Y as module version v0.3XX.Y
    major, minor, patch = PROMETHEUS_VERSION.lstrip("v").split(".")
    assert PROMETHEUS_MODULE_VERSION == f"v0.{major}{int(minor):02d}.{patch}"
    assert tool.url is not None and tool.member is not None and tool.url.endswith(f"/{tool.member.split('/')[0]}.tar.gz")


def test_the_installer_reads_the_version_prometheus_prints(tmp_path: Path) -> None:
    from gpuctl.tools.installer import reports_version

    fake = tmp_path / "prometheus"
    fake.write_text("#!/bin/sh\necho 'prometheus, version 3.16.0 (branch: , revision: unknown)'\n")
    fake.chmod(0o755)
    assert reports_version(fake, TOOLS["prometheus"])
    fake.write_text("#!/bin/sh\necho 'prometheus, version 3.16.01 (branch: , revision: unknown)'\n")
    assert not reports_version(fake, TOOLS["prometheus"])
