"""Issue 27, one way to name a cluster, through the CLI on one sim cluster: the global --context is the context a
create writes and the one `plan` and `apply` read through; Ctrl-C during a create names the step it stopped in
and leaves the cluster `incomplete` until a re-run completes it; a declined prompt says nothing changed;
`cluster delete` (without --context) takes the context it wrote and leaves no current context naming nothing."""

from __future__ import annotations

import json
import os
import pty
import re
import signal
import subprocess
import sys
import threading
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
import yaml

from tests.conftest import run_gpuctl

pytestmark = pytest.mark.integration

NAME = "ctxt"
CONTEXT = "ux-ctx"
CREATE = ["--context", CONTEXT, "cluster", "create", "--cloud", "sim", "--name", NAME, "--gpu", "t4", "--nodes", "1"]
OTHER: dict[str, Any] = {"apiVersion": "v1", "kind": "Config", "current-context": "other",
         "clusters": [{"name": "other", "cluster": {"server": "https://127.0.0.1:1"}}],
         "users": [{"name": "other", "user": {"token": "t"}}],
         "contexts": [{"name": "other", "context": {"cluster": "other", "user": "other"}}]}
STEP_LINE = re.compile(r"^(\S+)\s+(created|updated|no change|started|passed|deleted)\s+[\d.]+s$")
INTERRUPTED = re.compile(r"^error: interrupted (in|after) step (\S+); cluster 'ctxt' is incomplete; "
                         r"re-run the same command to resume \(the steps already done find nothing to do\)$")


@dataclass
class Interrupted:
    code: int
    stderr: str
    listed_after: str  # `cluster list` status right after the Ctrl-C
    rerun: subprocess.CompletedProcess[str]
    listed_rerun: str  # ... after the re-run


def listed(env: dict[str, str]) -> str:
    proc = run_gpuctl("-o", "json", "cluster", "list", "--cloud", "sim", env=env)
    assert proc.returncode == 0, proc.stderr
    return {c["name"]: c["status"] for c in json.loads(proc.stdout)}.get(NAME, "absent")


def interrupt_after(args: list[str], env: dict[str, str], step: str, timeout: float = 300) -> tuple[int, str]:
    """Run `gpuctl args`; once its stderr reports `step` done, send it SIGINT (as Ctrl-C does); its exit
    code and stderr."""
    proc = subprocess.Popen([sys.executable, "-m", "gpuctl", *args], stdout=subprocess.DEVNULL,
                            stderr=subprocess.PIPE, text=True, env=env)
    lines: list[str] = []
    seen = threading.Event()

    def read() -> None:
        assert proc.stderr is not None
        for line in proc.stderr:
            lines.append(line)
            if (m := STEP_LINE.match(line.strip())) and m.group(1) == step:
                seen.set()

    reader = threading.Thread(target=read, daemon=True)
    reader.start()
    try:
        assert seen.wait(timeout), "".join(lines)
        proc.send_signal(signal.SIGINT)
        code = proc.wait(timeout=120)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    reader.join(30)
    return code, "".join(lines)


@pytest.fixture(scope="module")
def env(sim_env: dict[str, str], tmp_path_factory: pytest.TempPathFactory) -> Iterator[dict[str, str]]:
    """A kubeconfig that holds another context before gpuctl writes its own."""
    kubeconfig = tmp_path_factory.mktemp("target") / "config"
    kubeconfig.write_text(yaml.safe_dump(OTHER))
    env = dict(sim_env, KUBECONFIG=str(kubeconfig))
    yield env
    run_gpuctl("cluster", "delete", "--cloud", "sim", "--name", NAME, "--yes", env=env)  # where a test failed first


@pytest.fixture(scope="module")
def interrupted(env: dict[str, str]) -> Interrupted:
    """`gpuctl --context ux-ctx cluster create ...` stopped by Ctrl-C once it has written its GPU config and
    labelled the nodes: in install-nfd (a Helm install), when the cluster exists and runs and the GPU stack is what is missing; and
    re-run."""
    code, stderr = interrupt_after(CREATE, env, "configure-nodes/gpu")
    after = listed(env)
    rerun = run_gpuctl("-o", "json", *CREATE, env=env, timeout=600)
    return Interrupted(code, stderr, after, rerun, listed(env))


def test_ctrl_c_names_the_step_and_the_cluster_stays_incomplete_until_a_rerun(interrupted: Interrupted) -> None:
    assert interrupted.code == 130, interrupted.stderr
    last = interrupted.stderr.strip().splitlines()[-1]
    print(f"\nCtrl-C after configure-nodes/gpu: {last}")
    match = INTERRUPTED.match(last)
    assert match, interrupted.stderr
    done = [m.group(1) for line in interrupted.stderr.splitlines() if (m := STEP_LINE.match(line.strip()))]
    assert done[-1] == "configure-nodes/gpu" and "Traceback" not in interrupted.stderr
    # Ctrl-C comes as the line is read: the run is still printing it, or already in the next step.
    assert (match.group(1), match.group(2)) in {("after", "configure-nodes/gpu"), ("in", "install-nfd")}, \
        interrupted.stderr
    assert interrupted.listed_after == "incomplete"  # its control plane runs: the platform on it is unfinished
    assert interrupted.rerun.returncode == 0, interrupted.rerun.stderr
    steps = {s["step"]: s["outcome"] for s in json.loads(interrupted.rerun.stdout)["steps"]}
    assert steps["ensure-cluster"] == steps["write-kubeconfig"] == steps["write-gpu-config"] == \
        steps["configure-nodes/gpu"] == "no change"  # resumed
    assert interrupted.listed_rerun == "running"


def test_context_is_the_one_create_writes_and_plan_and_apply_read_through(interrupted: Interrupted,
                                                                          env: dict[str, str],
                                                                          tmp_path: Path) -> None:
    doc = yaml.safe_load(Path(env["KUBECONFIG"]).read_text())
    assert {c["name"] for c in doc["contexts"]} == {"other", CONTEXT}
    assert doc["current-context"] == CONTEXT
    spec = tmp_path / "spec.yaml"
    exported = run_gpuctl(*CREATE, "--export-spec", env=env)
    assert exported.returncode == 0, exported.stderr
    spec.write_text(exported.stdout)

    plan = run_gpuctl("--context", CONTEXT, "-o", "json", "plan", "-f", str(spec), env=env)
    assert plan.returncode == 0, plan.stderr
    planned = {p["step"]: (p["action"], p["detail"]) for p in json.loads(plan.stdout)}
    changes = {step: said for step, said in planned.items() if said[0] not in ("no change", "check")}
    assert changes == {}, planned  # read through ux-ctx: nothing unknown, nothing to add
    assert "install-gpu-operator" in planned

    apply = run_gpuctl("--context", CONTEXT, "-o", "json", "apply", "-f", str(spec), env=env)
    assert apply.returncode == 0, apply.stderr
    assert json.loads(apply.stdout)["changed"] is False, apply.stderr
    doc = yaml.safe_load(Path(env["KUBECONFIG"]).read_text())
    assert {c["name"] for c in doc["contexts"]} == {"other", CONTEXT}  # no second context under gpuctl's name
    assert doc["current-context"] == CONTEXT


def test_a_declined_prompt_says_nothing_changed(interrupted: Interrupted, env: dict[str, str]) -> None:
    master, slave = pty.openpty()  # a terminal: the prompt is asked, not refused for want of --yes
    try:
        os.write(master, b"n\n")
        proc = subprocess.run([sys.executable, "-m", "gpuctl", "cluster", "delete", "--cloud", "sim", "--name", NAME],
                              stdin=slave, capture_output=True, text=True, env=env, timeout=60)
    finally:
        os.close(slave)
        os.close(master)
    assert proc.returncode == 1, proc.stderr
    # the prompt, then (on a terminal, after the echoed answer) one line
    assert proc.stderr == "Delete sim cluster 'ctxt'? [y/N]:nothing changed\n", proc.stderr
    assert listed(env) == "running"


def test_delete_takes_its_context_and_leaves_none_current(interrupted: Interrupted, env: dict[str, str]) -> None:
    """Deleted without --context, as the user did: the context it wrote under ux-ctx goes, with its cluster and
    user; the current context, which was it, is unset; the next cluster command says how to pick one."""
    proc = run_gpuctl("cluster", "delete", "--cloud", "sim", "--name", NAME, "--yes", env=env)
    assert proc.returncode == 0, proc.stderr
    assert f"removed context {CONTEXT} from {env['KUBECONFIG']}; it was the current context" in proc.stderr
    doc = yaml.safe_load(Path(env["KUBECONFIG"]).read_text())
    assert [(c["name"], c["context"]) for c in doc["contexts"]] == [("other", OTHER["contexts"][0]["context"])]
    assert [c["name"] for c in doc["clusters"]] == [c["name"] for c in doc["users"]] == ["other"]
    assert doc["current-context"] == ""
    assert listed(env) == "absent"
    status = run_gpuctl("status", env=env)
    assert status.returncode == 2, status.stderr
    assert status.stderr.strip() == (f"error: no cluster selected: the kubeconfig {env['KUBECONFIG']} has no current "
                                     "context; create one with 'gpuctl cluster create' or pick one with --context NAME")
