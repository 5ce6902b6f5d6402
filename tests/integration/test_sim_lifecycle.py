"""A cluster of its own: merged into the default kubeconfig, then deleted without a trace."""

from __future__ import annotations

import os
import stat
from pathlib import Path

import pytest
import yaml

from tests.conftest import run_gpuctl
from tests.support.sim import KwokCluster

pytestmark = pytest.mark.integration


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    status = Path(f"/proc/{pid}/stat")
    return not status.exists() or status.read_text().split(")")[-1].split()[0] != "Z"


def _processes_mentioning(text: str) -> list[int]:
    found = []
    for proc in Path("/proc").iterdir():
        if proc.name.isdigit() and _alive(int(proc.name)):
            try:
                if text in (proc / "cmdline").read_text():
                    found.append(int(proc.name))
            except OSError:
                continue
    return found


def test_create_merges_kubeconfig_and_delete_leaves_nothing(sim_env: dict[str, str]) -> None:
    default = Path(sim_env["KUBECONFIG"])
    default.parent.mkdir(parents=True, exist_ok=True)
    other = {"apiVersion": "v1", "kind": "Config", "current-context": "other",
             "clusters": [{"name": "other", "cluster": {"server": "https://10.0.0.1"}}],
             "users": [{"name": "other", "user": {"token": "x"}}],
             "contexts": [{"name": "other", "context": {"cluster": "other", "user": "other"}}]}
    default.write_text(yaml.safe_dump(other))

    proc = run_gpuctl("cluster", "create", "--cloud", "sim", "--name", "lifecycle", "--gpu", "t4", env=sim_env)
    assert proc.returncode == 0, proc.stderr
    assert "half-made" not in proc.stderr  # a new cluster, not a repaired one
    merged = yaml.safe_load(default.read_text())
    assert merged["current-context"] == "gpuctl-sim-lifecycle"
    assert {c["name"] for c in merged["contexts"]} == {"other", "gpuctl-sim-lifecycle"}
    assert stat.S_IMODE(default.stat().st_mode) == 0o600

    kwok = KwokCluster("lifecycle")
    pids = kwok.pids()
    assert len(pids) == 6 and all(_alive(p) for p in pids.values())  # 5 control-plane components + sim operator
    keys = list(kwok.dir.rglob("*.key"))  # the CA's and the admin's private keys: the owner's only
    assert {k.name for k in keys} >= {"ca.key", "admin.key"}
    assert all(stat.S_IMODE(k.stat().st_mode) == 0o600 for k in keys)
    assert stat.S_IMODE(kwok.dir.stat().st_mode) == 0o700

    proc = run_gpuctl("cluster", "delete", "--cloud", "sim", "--name", "lifecycle", "--yes", env=sim_env)
    assert proc.returncode == 0, proc.stderr
    assert [p for p in pids.values() if _alive(p)] == []
    assert _processes_mentioning(str(kwok.dir)) == []
    assert not kwok.dir.exists()
    work = kwok.dir.parents[1]  # kwokctl's work dir: gpuctl's kwokctl config and lock of the cluster go too
    assert [p.name for p in work.iterdir() if p.name.startswith("lifecycle.")] == []

    left = yaml.safe_load(default.read_text())
    assert [c["name"] for c in left["contexts"]] == ["other"]
    assert [c["name"] for c in left["clusters"]] == ["other"]
    assert left["current-context"] == ""
    listed = run_gpuctl("cluster", "list", "--cloud", "sim", "-o", "json", env=sim_env)
    assert "lifecycle" not in listed.stdout
