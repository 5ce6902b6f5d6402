"""The README's quick start, run literally as a new user runs it: a GPU Job completes in the team namespace.

The commands are read from the README (section "Your first GPU job") and run one by one through bash in the
checkout, with `gpuctl` and the pinned `kubectl` on PATH, as `make demo` (examples/quickstart.sh) runs them.
"""

from __future__ import annotations

import json
import re
import shlex
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.conftest import run_gpuctl
from tests.support.tools import find_tool

pytestmark = pytest.mark.integration
ROOT = Path(__file__).resolve().parents[2]


def readme_commands() -> list[str]:
    readme = (ROOT / "README.md").read_text()
    section = readme[readme.index("### Your first GPU job"):]
    block = re.search(r"```sh\n(.*?)```", section, re.S)
    assert block is not None, "the quick start has no sh block"
    return [line.split("  #")[0].strip() for line in block[1].splitlines() if line.strip()]


def test_make_demo_runs_the_readmes_commands() -> None:
    script = (ROOT / "examples" / "quickstart.sh").read_text().splitlines()
    commands = [line for line in script if line and not line.startswith("#") and line != "set -eu"]
    assert commands == [c for c in readme_commands() if not c.startswith("export ")]


@pytest.fixture(scope="module")
def user_env(sim_env: dict[str, str], tmp_path_factory: pytest.TempPathFactory) -> Iterator[dict[str, str]]:
    """A new user's shell: a kubeconfig and state dir of their own, gpuctl and kubectl on PATH."""
    home = tmp_path_factory.mktemp("quickstart")
    kubectl = find_tool("kubectl")
    assert kubectl is not None, "the sim tools are installed by sim_env"
    path = f"{Path(sys.executable).parent}:{kubectl.parent}:{sim_env['PATH']}"
    env = dict(sim_env, GPUCTL_STATE_DIR=str(home / "state"), KUBECONFIG=str(home / "kube" / "config"), PATH=path)
    yield env
    proc = run_gpuctl("cluster", "delete", "--cloud", "sim", "--name", "demo", "--yes", env=env)
    assert proc.returncode == 0, proc.stderr


def shell(command: str, env: dict[str, str]) -> subprocess.CompletedProcess[str]:
    return subprocess.run(["bash", "-c", command], cwd=ROOT, env=env, capture_output=True, text=True, timeout=900)


def test_the_quick_start_ends_with_a_completed_gpu_job(user_env: dict[str, str]) -> None:
    commands = readme_commands()
    wait = next(i for i, c in enumerate(commands) if c.startswith("kubectl -n team-a wait --for=condition=complete"))
    assert 2 < wait < len(commands) - 1, commands  # steps after create before the wait, and a look after it
    outputs = {}
    for command in commands[:wait]:
        proc = shell(command, user_env)
        assert proc.returncode == 0, f"{command}\n{proc.stdout}\n{proc.stderr}"
        outputs[command] = proc
    applied = time.monotonic()

    # `cluster create` ends by naming the next step, the one the README takes.
    create = next(p for c, p in outputs.items() if c.startswith("gpuctl cluster create"))
    for command in commands[2:wait + 1]:
        assert command in create.stderr, create.stderr

    proc = shell(commands[wait], user_env)
    took = time.monotonic() - applied
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert took <= 60, f"the job completed {took:.1f}s after it was applied"
    for command in commands[wait + 1:]:
        proc = shell(command, user_env)
        assert proc.returncode == 0, f"{command}\n{proc.stdout}\n{proc.stderr}"

    pods = json.loads(shell("kubectl -n team-a get pods -l job-name=cuda-vectoradd -o json", user_env).stdout)
    [pod] = pods["items"]
    assert pod["status"]["phase"] == "Succeeded", pod["status"]
    node = json.loads(shell(f"kubectl get node {shlex.quote(pod['spec']['nodeName'])} -o json", user_env).stdout)
    assert node["metadata"]["labels"]["nvidia.com/gpu.product"].startswith("Tesla-T4"), node["metadata"]["labels"]
    print(f"\nquick start: the GPU job completed {took:.1f}s after `kubectl apply`")


def test_the_same_job_outside_a_team_namespace_is_refused_by_the_scheduler(user_env: dict[str, str]) -> None:
    """What the README says gpuctl does differently: the scheduler itself keeps a GPU pod in `default` off
    the tainted GPU nodes."""
    proc = shell("kubectl -n default apply -f examples/gpu-job.yaml", user_env)
    assert proc.returncode == 0, proc.stderr
    try:
        deadline = time.monotonic() + 60
        message = ""
        while time.monotonic() < deadline:  # until the scheduler has decided (PodScheduled=False)
            pods = json.loads(shell("kubectl -n default get pods -l job-name=cuda-vectoradd -o json",
                                    user_env).stdout)["items"]
            conditions = [c for p in pods for c in p["status"].get("conditions", []) if c["type"] == "PodScheduled"]
            if conditions and conditions[0]["status"] == "False":
                message = conditions[0]["message"]
                break
            time.sleep(0.5)
        assert "untolerated taint" in message, message
    finally:
        shell("kubectl -n default delete job cuda-vectoradd --wait=false", user_env)
