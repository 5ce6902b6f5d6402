"""The installer's order of sources, without network or Go: PATH, cache, and the failure report."""

from pathlib import Path

import pytest

from gpuctl.tools.gobuild import helm_module
from gpuctl.tools.installer import cached_path, ensure_installed, ensure_tools, find_tool, reports_version
from gpuctl.tools.pins import TOOLS, helm_tool
from gpuctl.util.errors import ToolError


def fake_tool(bindir: Path, name: str, output: str) -> Path:
    bindir.mkdir(exist_ok=True)
    path = bindir / name
    path.write_text(f"#!/bin/sh\necho '{output}'\n")
    path.chmod(0o755)
    return path


@pytest.fixture
def offline(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> Path:
    """Empty cache, only our fake bin dir on PATH (no Go), and downloads refused at once."""
    monkeypatch.setenv("GPUCTL_CACHE_DIR", str(tmp_path / "cache"))
    monkeypatch.setenv("PATH", str(tmp_path / "bin"))
    monkeypatch.setenv("https_proxy", "http://127.0.0.1:9")
    return tmp_path / "bin"


def test_version_matching_is_exact() -> None:
    helm = helm_tool("v3.21.4")
    etcd = TOOLS["etcd"]
    assert reports_version("/bin/echo", TOOLS["kubectl"]) is False
    for output, ok in [("v3.21.4+g1234", True), ("v3.21.40", False), ("v13.21.4", False)]:
        assert reports_version_of(output, helm) is ok, output
    assert reports_version_of(f"etcd Version: {etcd.version.lstrip('v')}\nGit SHA: x", etcd)


def reports_version_of(output: str, tool) -> bool:
    import tempfile

    with tempfile.TemporaryDirectory() as tmp:
        return reports_version(fake_tool(Path(tmp), "t", output), tool)


def test_tool_on_path_at_the_pinned_version_is_linked_into_the_cache(offline: Path) -> None:
    fake = fake_tool(offline, "helm", f"{TOOLS['helm'].version}+gdeadbeef")
    [helm] = ensure_tools(["helm"])
    assert helm.source == "PATH"
    assert cached_path(TOOLS["helm"]).resolve() == fake.resolve()
    [again] = ensure_tools(["helm"])
    assert again.source == "cached"
    assert find_tool("helm") == cached_path(TOOLS["helm"])


def test_nothing_works_says_exactly_what_is_missing(offline: Path) -> None:
    fake_tool(offline, "helm", "v3.0.0")  # wrong version: not used
    with pytest.raises(ToolError) as err:
        ensure_tools(["helm", "kwokctl"])
    line = err.value.one_line()
    assert f"helm {TOOLS['helm'].version} (download from get.helm.sh failed" in line
    assert "kwokctl v0.8.0 (download from github.com failed" in line
    assert "no Go toolchain on PATH" in line and "install Go 1.26+" in line
    assert not cached_path(TOOLS["helm"]).exists()
    assert find_tool("helm") is None


def test_a_helm_other_than_the_pin_is_installed_and_cached_by_its_own_version(offline: Path) -> None:
    """ensure_installed with an explicit Tool (a test's second Helm): found on PATH at its version, cached under
    that version, and the pin left alone."""
    old = helm_tool("v3.21.4")
    assert old.version != TOOLS["helm"].version
    fake_tool(offline, "helm", "v3.21.4+gdeadbeef")
    [helm] = ensure_installed([old])
    assert (helm.source, helm.version) == ("PATH", "v3.21.4")
    assert helm.path == cached_path(old) and cached_path(old).parent.name == "v3.21.4"
    assert find_tool("helm") is None  # the pin is not v3.21.4: not installed by this


def test_helm_builds_from_its_majors_module() -> None:
    """Each Helm major is its own Go module (helm.sh/helm/v4@v4.3.1 go.mod: `module helm.sh/helm/v4`)."""
    assert helm_module("v3.21.4") == "helm.sh/helm/v3"
    assert helm_module("v4.3.1") == "helm.sh/helm/v4"
