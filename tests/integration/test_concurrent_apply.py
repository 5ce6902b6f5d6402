"""Issue 29: on an existing cluster the apply lock covers every step that writes, the cloud's node-group changes
included. Two `apply -f` with different specs started together on one sim cluster: one waits for the other (and
says so), both exit 0, and the spec of the one that finished last is the cluster's entirely (`plan -f` of it finds
nothing to do). Before, both ran ensure-nodegroup unlocked and one exited 6 after the other scaled the group under
it."""

from __future__ import annotations

import json
import re
import socket
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.conftest import run_gpuctl
from tests.integration.conftest import sim_spec

pytestmark = pytest.mark.integration

NAME = "racing"
START = "{name: gpu, gpu: t4, nodes: 2, sharing: {timeSlicing: {replicas: 4}}}"
SPECS = {"small": "{name: gpu, gpu: t4, nodes: 1, sharing: {timeSlicing: {replicas: 2}}}",
         "large": "{name: gpu, gpu: t4, nodes: 3, sharing: {timeSlicing: {replicas: 8}}}"}
WAITED = re.compile(r"waiting for the apply lock on cluster 'racing': another gpuctl apply holds it \((\S+)\)")


@pytest.fixture(scope="module")
def cluster(sim_env: dict[str, str], tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[dict[str, str], Path]]:
    """A sim cluster applied from a third spec (2 nodes, 4 slices): both racing specs change its node group."""
    root = tmp_path_factory.mktemp("racing")
    env = dict(sim_env, KUBECONFIG=str(root / "kubeconfig"))
    start = root / "start.yaml"
    start.write_text(sim_spec(NAME, START))
    proc = run_gpuctl("apply", "-f", str(start), env=env, timeout=600)
    assert proc.returncode == 0, proc.stderr
    yield env, root
    run_gpuctl("cluster", "delete", "--cloud", "sim", "--name", NAME, "--yes", env=env)


def test_two_applies_with_different_specs_take_turns_and_the_last_one_wins(
        cluster: tuple[dict[str, str], Path]) -> None:
    env, root = cluster
    files = {}
    for which, group in SPECS.items():
        files[which] = root / f"{which}.yaml"
        files[which].write_text(sim_spec(NAME, group))
    procs = {which: subprocess.Popen([sys.executable, "-m", "gpuctl", "apply", "-f", str(path)], env=env,
                                     stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
             for which, path in files.items()}
    outputs = {which: proc.communicate(timeout=600) for which, proc in procs.items()}
    for which, proc in procs.items():
        assert proc.returncode == 0, (which, outputs[which][1])
        assert "Traceback" not in outputs[which][1]
    waited = {which: m.group(1) for which, (_, err) in outputs.items() if (m := WAITED.search(err))}
    assert len(waited) == 1, outputs  # one waited, the other took the lock at once
    (last, holder), = waited.items()
    first = next(which for which in SPECS if which != last)
    print(f"\n{last} waited for {first} (holder {holder}):\n{outputs[last][1]}")
    assert holder.startswith(f"{socket.gethostname()}/{procs[first].pid}/"), (holder, procs[first].pid)
    assert f"took the apply lock on cluster '{NAME}' after waiting" in outputs[last][1]

    plan = run_gpuctl("-o", "json", "plan", "-f", str(files[last]), env=env)
    assert plan.returncode == 0, plan.stderr
    planned = {p["step"]: (p["action"], p["detail"]) for p in json.loads(plan.stdout)}
    changes = {step: said for step, said in planned.items() if said[0] not in ("no change", "check")}
    assert changes == {}, planned  # the last spec entirely: nodes, sharing and every setting
    other = run_gpuctl("-o", "json", "plan", "-f", str(files[first]), env=env)
    assert other.returncode == 0, other.stderr
    assert {p["step"] for p in json.loads(other.stdout) if p["action"] not in ("no change", "check")} >= {
        "ensure-nodegroup/gpu"}  # not a mix: the first spec's node count is gone

