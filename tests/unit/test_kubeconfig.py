import stat
from pathlib import Path

import pytest
import yaml

from gpuctl.kube.kubeconfig import default_path, remove_context, write_kubeconfig


def entry(name: str, server: str = "https://127.0.0.1:6443") -> dict:
    return {"apiVersion": "v1", "kind": "Config",
            "clusters": [{"name": name, "cluster": {"server": server}}],
            "users": [{"name": name, "user": {"token": "t"}}],
            "contexts": [{"name": name, "context": {"cluster": name, "user": name}}],
            "current-context": name}


def test_default_path_follows_kubeconfig_env(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.setenv("KUBECONFIG", f"{tmp_path}/a:{tmp_path}/b")
    assert default_path() == tmp_path / "a"
    monkeypatch.delenv("KUBECONFIG")
    monkeypatch.setenv("HOME", str(tmp_path))
    assert default_path() == tmp_path / ".kube" / "config"


def test_explicit_path_gets_only_this_cluster(tmp_path: Path) -> None:
    target = tmp_path / "out" / "demo.yaml"
    path, changed = write_kubeconfig(entry("demo"), target)
    assert path == target and changed
    doc = yaml.safe_load(target.read_text())
    assert doc["current-context"] == "demo" and len(doc["contexts"]) == 1
    assert stat.S_IMODE(target.stat().st_mode) == 0o600


def test_merge_keeps_other_contexts_and_is_idempotent(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.setenv("KUBECONFIG", str(tmp_path / "config"))
    write_kubeconfig(entry("other", "https://10.0.0.1"), None)
    _, changed = write_kubeconfig(entry("demo"), None)
    assert changed
    doc = yaml.safe_load((tmp_path / "config").read_text())
    assert [c["name"] for c in doc["contexts"]] == ["other", "demo"]
    assert doc["current-context"] == "demo"
    mtime = (tmp_path / "config").stat().st_mtime_ns
    assert write_kubeconfig(entry("demo"), None)[1] is False
    assert (tmp_path / "config").stat().st_mtime_ns == mtime
    # A new endpoint for the same name replaces the entry rather than duplicating it.
    assert write_kubeconfig(entry("demo", "https://127.0.0.1:7000"), None)[1] is True
    doc = yaml.safe_load((tmp_path / "config").read_text())
    assert [c["cluster"]["server"] for c in doc["clusters"]] == ["https://10.0.0.1", "https://127.0.0.1:7000"]


def test_remove_context(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.setenv("KUBECONFIG", str(tmp_path / "config"))
    assert remove_context("demo") is False  # no file: nothing to do
    write_kubeconfig(entry("other"), None)
    write_kubeconfig(entry("demo"), None)
    assert remove_context("demo") is True
    doc = yaml.safe_load((tmp_path / "config").read_text())
    assert [c["name"] for c in doc["contexts"]] == ["other"]
    assert [c["name"] for c in doc["users"]] == ["other"]
    assert doc["current-context"] == ""
    assert remove_context("demo") is False
