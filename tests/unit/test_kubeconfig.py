import stat
from pathlib import Path

import pytest
import yaml

from gpuctl.kube.kubeconfig import (
    NoClusterSelected,
    check_selected,
    default_path,
    named,
    remove_cluster,
    write_kubeconfig,
)
from gpuctl.util.errors import UsageError


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


def test_remove_cluster_takes_every_context_gpuctl_wrote_for_it(monkeypatch: pytest.MonkeyPatch,
                                                                  tmp_path: Path) -> None:
    monkeypatch.setenv("KUBECONFIG", str(tmp_path / "config"))
    assert remove_cluster("demo") is None  # no file: nothing to do
    write_kubeconfig(entry("other"), None)
    write_kubeconfig(entry("demo"), None)
    write_kubeconfig(named(entry("demo"), "my-ctx"), None)  # `gpuctl --context my-ctx cluster create`
    removed = remove_cluster("demo")
    assert removed is not None and removed.contexts == ["demo", "my-ctx"] and removed.was_current
    doc = yaml.safe_load((tmp_path / "config").read_text())
    assert [c["name"] for c in doc["contexts"]] == ["other"]
    assert [c["name"] for c in doc["clusters"]] == ["other"]
    assert [c["name"] for c in doc["users"]] == ["other"]
    assert doc["current-context"] == ""  # unset: never a name that points at nothing
    assert remove_cluster("demo") is None


def test_remove_cluster_keeps_another_current_context(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.setenv("KUBECONFIG", str(tmp_path / "config"))
    write_kubeconfig(entry("demo"), None)
    write_kubeconfig(entry("other"), None)
    removed = remove_cluster("demo")
    assert removed is not None and not removed.was_current
    assert yaml.safe_load((tmp_path / "config").read_text())["current-context"] == "other"


def test_no_kubeconfig_selects_no_cluster(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.setenv("KUBECONFIG", str(tmp_path / "absent"))
    with pytest.raises(NoClusterSelected) as caught:
        check_selected(None, None)
    assert caught.value.one_line() == ("no cluster selected: there is no kubeconfig at " + str(tmp_path / "absent")
                                       + "; create one with 'gpuctl cluster create' or pick one with --context NAME")
    assert caught.value.exit_code == 2


@pytest.mark.parametrize(("content", "expected"), [
    ("", "the kubeconfig {path} has no current context"),
    ("apiVersion: v1\nkind: Config\ncontexts: []\n", "the kubeconfig {path} has no current context"),
    ("current-context: gone\n", "the current context 'gone' of {path} is not one of its contexts"),
    ("current-context: c\ncontexts: [{name: c, context: {cluster: x, user: u}}]\n",
     "context 'c' of {path} names cluster 'x', which it does not hold"),
])
def test_a_kubeconfig_without_a_current_cluster_selects_none(tmp_path: Path, content: str, expected: str) -> None:
    path = tmp_path / "config"
    path.write_text(content)
    with pytest.raises(NoClusterSelected) as caught:
        check_selected(path, None)
    line = caught.value.one_line()
    assert line.startswith("no cluster selected: " + expected.format(path=path)), line
    assert line.endswith("; create one with 'gpuctl cluster create' or pick one with --context NAME"), line


def test_a_named_context_that_is_missing_lists_those_there_are(tmp_path: Path) -> None:
    path = tmp_path / "config"
    contexts = ", ".join(f"{{name: c{i}, context: {{cluster: k, user: u}}}}" for i in range(7))
    path.write_text(f"clusters: [{{name: k, cluster: {{server: 'https://x'}}}}]\ncontexts: [{contexts}]\n")
    with pytest.raises(UsageError) as caught:
        check_selected(path, "nope")
    assert caught.value.one_line() == (f"--context: no context 'nope' in {path}; contexts there: c0, c1, c2, c3, c4 "
                                       "(and 2 more)")
    check_selected(path, "c3")  # a context whose cluster is there: selected
