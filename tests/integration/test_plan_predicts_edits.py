"""`gpuctl plan` says what `gpuctl apply` then does, edit after edit of one spec file, as a user changes a running
platform: for every step that is not a check, plan's action is apply's outcome. The edits are those whose effect
reaches past their own step: a group's taint added and taken away again (the nodes, the GPU Operator's
tolerations, the tenants' Kueue flavors), Kueue turned on under existing tenants, a group's sharing changed, a
group grown (nodes that plan cannot read yet)."""

from __future__ import annotations

import copy
import json
import os
import signal
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml

from tests.conftest import run_gpuctl
from tests.support.sim import KwokCluster
from tests.support.util import ExitCode

pytestmark = pytest.mark.integration
NAME = "plan-edits"
DEDICATED = "dedicated=train:NoSchedule"
GPU_TAINT = "nvidia.com/gpu=true:NoSchedule"
BASE: dict[str, Any] = {
    "apiVersion": "gpuctl.dev/v1alpha1", "kind": "GpuCluster", "metadata": {"name": NAME},
    "spec": {"provider": {"cloud": "sim"},
             "nodeGroups": [{"name": "inf", "gpu": "t4", "nodes": 2, "sharing": {"timeSlicing": {"replicas": 4}}},
                            {"name": "train", "gpu": "a100-40gb", "nodes": 1,
                             "sharing": {"mig": {"layout": "3g.20gb-2x2g.10gb"}}}],
             "tenants": [{"name": "team-a", "gpus": 2}, {"name": "team-b", "gpus": 0, "mig": {"2g.10gb": 2}}]}}


class Platform:
    def __init__(self, env: dict[str, str], root: Path) -> None:
        self.env, self.root, self.doc = env, root, copy.deepcopy(BASE)

    def run(self, verb: str, path: Path) -> Any:
        proc = run_gpuctl("-o", "json", verb, "-f", str(path), env=self.env)
        assert proc.returncode == 0, proc.stderr
        return json.loads(proc.stdout)

    def edit(self, name: str, change: Callable[[dict[str, Any]], None]) -> dict[str, str]:
        """Edit the spec, plan it, apply it: apply's outcome of each step, once plan foretold it."""
        change(self.doc["spec"])
        path = self.root / f"{name}.yaml"
        path.write_text(yaml.safe_dump(self.doc, sort_keys=False))
        planned = {s["step"]: s["action"] for s in self.run("plan", path) if s["action"] != "check"}
        outcomes = {s["step"]: s["outcome"] for s in self.run("apply", path)["steps"]}
        assert {step: outcomes.get(step) for step in planned} == planned, name
        return outcomes

    def taints(self, node: str) -> list[str]:
        proc = run_gpuctl("status", "-o", "json", env=self.env)
        assert proc.returncode == 0, proc.stderr
        [row] = [r for r in json.loads(proc.stdout)["nodes"] if r["node"] == node]
        return sorted(row["taints"])


@pytest.fixture(scope="module")
def edited(sim_env: dict[str, str], tmp_path_factory: pytest.TempPathFactory) -> Iterator[Platform]:
    root = tmp_path_factory.mktemp(NAME)
    made = Platform(dict(sim_env, KUBECONFIG=str(root / "kubeconfig")), root)
    path = root / "base.yaml"
    path.write_text(yaml.safe_dump(made.doc))
    made.run("apply", path)
    try:
        yield made
    finally:
        assert run_gpuctl("cluster", "delete", "--name", NAME, "--yes", env=made.env).returncode == 0


def test_a_taint_added_then_taken_away_reaches_the_nodes_and_back(edited: Platform) -> None:
    def taint(spec: dict[str, Any]) -> None:
        spec["nodeGroups"][1]["taints"] = [GPU_TAINT, DEDICATED]

    def untaint(spec: dict[str, Any]) -> None:
        del spec["nodeGroups"][1]["taints"]

    added = edited.edit("taint", taint)
    assert added["configure-nodes/train"] == added["install-gpu-operator"] == "updated"
    assert edited.taints("train-0") == sorted([GPU_TAINT, DEDICATED])
    removed = edited.edit("untaint", untaint)  # the operator no longer tolerates it: off the node, or no plugin
    assert removed["configure-nodes/train"] == "updated" and removed["validate/train"] == "passed"
    assert edited.taints("train-0") == [GPU_TAINT]


def test_a_taint_taken_away_waits_for_the_operator_to_drop_its_toleration(edited: Platform) -> None:
    """The operator rewrites the device plugin's DaemonSet without the dropped toleration a moment after the
    upgrade, and its pods restart then: with the operator stopped, the DaemonSet before the rewrite is not taken
    for the new one (else the validation after the wait finds nodes that advertise no GPU)."""
    edited.edit("retaint", lambda spec: spec["nodeGroups"][1].update(taints=[GPU_TAINT, DEDICATED]))
    del edited.doc["spec"]["nodeGroups"][1]["taints"]
    path = edited.root / "untaint-stopped.yaml"
    path.write_text(yaml.safe_dump(edited.doc, sort_keys=False))
    operator = KwokCluster(NAME).operator_pid()
    assert operator is not None
    os.kill(operator, signal.SIGSTOP)
    try:
        proc = run_gpuctl("apply", "-f", str(path), "--timeout", "10", env=edited.env)
    finally:
        os.kill(operator, signal.SIGCONT)
    assert proc.returncode == ExitCode.TIMEOUT, proc.stderr
    assert "no toleration dedicated=train:NoSchedule, still there" in proc.stderr, proc.stderr
    done = {s["step"]: s["outcome"] for s in edited.run("apply", path)["steps"]}
    assert done["validate/train"] == done["validate/inf"] == "passed"
    assert edited.taints("train-0") == [GPU_TAINT]


def test_kueue_under_existing_tenants_a_sharing_change_and_new_nodes_are_foretold(edited: Platform) -> None:
    def kueue(spec: dict[str, Any]) -> None:
        spec["kueue"] = {"enabled": True}

    def mps(spec: dict[str, Any]) -> None:  # MPS needs the single MIG strategy: one profile on train
        spec["nodeGroups"][0]["sharing"] = {"mps": {"replicas": 2}}
        spec["nodeGroups"][1]["sharing"] = {"mig": {"layout": "all-1g.5gb"}}

    def grow(spec: dict[str, Any]) -> None:  # plan cannot read nodes that do not exist yet: it counts them
        spec["nodeGroups"][0]["nodes"] = 3

    queued = edited.edit("kueue", kueue)
    assert queued["ensure-tenant/team-a"] == queued["ensure-tenant/team-b"] == "updated"  # their queues
    shared = edited.edit("mps", mps)
    assert shared["ensure-tenant/team-a"] == "updated"  # its flavor follows the group's sharing
    grown = edited.edit("grow", grow)
    assert grown["ensure-nodegroup/inf"] == grown["configure-nodes/inf"] == "updated"
    assert {s for s, o in edited.edit("again", lambda spec: None).items() if o not in ("no change", "passed")} == set()
