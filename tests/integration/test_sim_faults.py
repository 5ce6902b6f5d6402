"""Faults a sim cluster recovers from (issue 18): a kube-apiserver frozen for 20 s in the middle of an
`apply`, a control-plane process that dies, and a simulated operator killed while a MIG change is
pending. Each ends in a command that succeeds in normal time, or fails at once naming what is wrong,
never in a validation or MIG wait that runs out minutes later.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.conftest import run_gpuctl
from tests.integration.conftest import sim_spec
from tests.support.sim import SUPERVISED, KwokCluster, component_pid
from tests.support.util import ExitCode

pytestmark = pytest.mark.integration

FREEZE_S = 20.0  # past kube-scheduler's and kube-controller-manager's 10 s lease renew deadline
LAYOUT = "custom-3g.20gb-2x2g.10gb"


class Faults:
    def __init__(self, name: str, env: dict[str, str], workdir: Path) -> None:
        self.name = name
        self.env = env
        self.workdir = workdir
        self.cluster = KwokCluster(name)

    def spec(self, nodes: int) -> Path:
        path = self.workdir / f"spec-{nodes}.yaml"
        group = f"{{name: gpu, gpu: a100-40gb, nodes: {nodes}, sharing: {{mig: {{layout: 3g.20gb-2x2g.10gb}}}}}}"
        path.write_text(sim_spec(self.name, group, "{migStrategy: mixed}"))
        return path

    def core(self):
        from kubernetes import client, config

        return client.CoreV1Api(config.new_client_from_config(str(self.cluster.kubeconfig_path)))

    def operator_log(self) -> str:
        return (self.cluster.dir / "logs" / "gpuctl-sim-operator.log").read_text(errors="replace")


@pytest.fixture(scope="module")
def faults(sim_env: dict[str, str], tmp_path_factory: pytest.TempPathFactory) -> Iterator[Faults]:
    """A sim cluster of these tests' own: one a100-40gb node with a MIG layout, validated."""
    workdir = tmp_path_factory.mktemp("faults")
    env = dict(sim_env, KUBECONFIG=str(workdir / "kubeconfig"))
    faults = Faults(f"faults-{uuid.uuid4().hex[:6]}", env, workdir)
    proc = run_gpuctl("apply", "-f", str(faults.spec(1)), env=env, timeout=300)
    assert proc.returncode == 0, proc.stderr
    try:
        yield faults
    finally:
        proc = run_gpuctl("cluster", "delete", "--cloud", "sim", "--name", faults.name, "--yes", env=env)
        assert proc.returncode == 0, proc.stderr


def _wait_for(condition, timeout: float, what: str) -> float:
    started = time.monotonic()
    while not condition():
        assert time.monotonic() - started < timeout, f"{what}: not after {timeout:.0f}s"
        time.sleep(0.1)
    return time.monotonic() - started


def test_an_apply_survives_a_frozen_apiserver(faults: Faults) -> None:
    """The apply adds a node, and waits for the MIG manager to apply the group's layout there; meanwhile the
    kube-apiserver is frozen for 20 s. (The simulated operator is stopped until then, so that the apply is
    in that wait, whose requests go over a connection it holds: a new connection to a frozen server fails
    its 10 s handshake deadline, by design.) The smoke test that ends the apply needs kube-scheduler (and
    kube-controller-manager): neither may have died of the freeze (leader election is off in the sim's
    single-instance control plane, and the operator that would restart them was stopped too), and the
    apply ends with exit 0."""
    cluster = faults.cluster
    v1 = faults.core()
    before = {c: component_pid(cluster.dir, c) for c in ("kube-scheduler", "kube-controller-manager")}
    assert all(before.values()), before
    apiserver, operator = cluster.pids()["kube-apiserver"], cluster.operator_pid()
    assert operator is not None
    started = time.monotonic()
    os.kill(operator, signal.SIGSTOP)
    frozen = False
    try:
        apply = subprocess.Popen([sys.executable, "-m", "gpuctl", "apply", "-f", str(faults.spec(2))],
                                 env=faults.env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)

        def mig_wait() -> bool:
            assert apply.poll() is None, f"apply ended (rc {apply.returncode}) before its MIG wait"
            nodes = {n.metadata.name: n.metadata.labels for n in v1.list_node(_request_timeout=5).items}
            return (nodes.get("gpu-1") or {}).get("nvidia.com/mig.config") == LAYOUT

        _wait_for(mig_wait, 120, "the apply's MIG wait")
        time.sleep(1)  # the apply reads the node's state now
        os.kill(apiserver, signal.SIGSTOP)
        frozen = True
        time.sleep(FREEZE_S)
    finally:
        if frozen:
            os.kill(apiserver, signal.SIGCONT)
        os.kill(operator, signal.SIGCONT)
        try:
            _, stderr = apply.communicate(timeout=300)
        except subprocess.TimeoutExpired:
            apply.kill()
            _, stderr = apply.communicate()
    took = time.monotonic() - started
    print(f"\napply with a {FREEZE_S:.0f}s freeze took {took:.1f}s")
    assert apply.returncode == 0, stderr
    assert "validate/gpu" in stderr and took < 150, stderr  # the smoke test's own wait is 120 s
    after = {c: component_pid(cluster.dir, c) for c in before}
    assert after == before, "a control-plane process exited during the freeze"
    for component in before:
        log = (cluster.dir / "logs" / f"{component}.log").read_text(errors="replace")
        assert "leaderelection lost" not in log.lower(), component


def test_a_control_plane_process_that_dies_is_started_again(faults: Faults) -> None:
    """kill -9 of each supervised component: the simulated operator starts it again within seconds and
    logs it, and the cluster works (a validation schedules, makes and runs its smoke-test pod)."""
    cluster = faults.cluster
    for component in SUPERVISED:
        old = component_pid(cluster.dir, component)
        assert old is not None, component
        os.kill(old, signal.SIGKILL)
        took = _wait_for(lambda c=component, o=old: component_pid(cluster.dir, c) not in (None, o), 15,
                         f"{component} started again")
        print(f"\n{component} started again after {took:.1f}s")
        # the operator logs the restart just after the new process is up: as it comes, not at once
        _wait_for(lambda c=component: f"{c} was not running: started it again" in faults.operator_log(), 15,
                  f"the operator's log of {component}'s restart")
    started = time.monotonic()
    proc = run_gpuctl("validate", env=faults.env, timeout=300)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert time.monotonic() - started < 60
    assert "smoke-test" in proc.stdout and "CUDA vectoradd passed" in proc.stdout


def test_a_dead_component_nothing_restarts_fails_a_command_at_once(faults: Faults) -> None:
    """Operator and kwok controller both dead: a node-group command fails at once naming the dead
    component (exit 5), and the next apply starts both again."""
    cluster = faults.cluster
    for name in ("gpuctl-sim-operator", "kwok-controller"):
        pid = cluster.pids()[name]
        os.kill(pid, signal.SIGKILL)
        _wait_for(lambda p=pid: not Path(f"/proc/{p}/cmdline").exists() or not Path(f"/proc/{p}/cmdline").read_bytes(),
                  10, f"{name} gone")
    started = time.monotonic()
    proc = run_gpuctl("nodegroup", "scale", "--cloud", "sim", "--cluster", faults.name, "--name", "gpu", "--nodes", "3",
                      env=faults.env, timeout=120)
    assert proc.returncode == ExitCode.CLUSTER, proc.stderr
    assert time.monotonic() - started < 20
    assert "kwok-controller not running" in proc.stderr, proc.stderr
    proc = run_gpuctl("apply", "-f", str(faults.spec(2)), env=faults.env, timeout=300)
    assert proc.returncode == 0, proc.stderr
    assert "started its stopped components" in proc.stderr and "started the simulated operator" in proc.stderr
    assert cluster.running() and cluster.operator_pid() is not None


def test_a_mig_change_left_pending_by_a_dead_operator_is_answered_when_it_restarts(faults: Faults) -> None:
    """`mig apply` of another layout while the operator is dead runs out (exit 7); the apply of the original
    layout restarts the operator, whose MIG manager answers the label at start (success: that layout is the
    one applied), so the apply ends with exit 0, not 300 s later."""
    cluster = faults.cluster
    os.kill(cluster.pids()["gpuctl-sim-operator"], signal.SIGKILL)
    proc = run_gpuctl("mig", "apply", "all-balanced", "--nodegroup", "gpu", "--timeout", "15", env=faults.env,
                      timeout=120)
    assert proc.returncode == ExitCode.TIMEOUT, proc.stderr
    assert "MIG config all-balanced" in proc.stderr.strip().splitlines()[-1], proc.stderr
    started = time.monotonic()
    proc = run_gpuctl("apply", "-f", str(faults.spec(2)), env=faults.env, timeout=400)
    took = time.monotonic() - started
    print(f"\napply of the original layout took {took:.1f}s")
    assert proc.returncode == 0, proc.stderr
    assert took < 60, proc.stderr
    assert "started the simulated operator" in proc.stderr
    nodes = faults.core().list_node(label_selector="gpuctl.dev/nodegroup=gpu").items
    assert sorted(n.metadata.name for n in nodes) == ["gpu-0", "gpu-1"]  # the spec's 2 nodes, each checked below
    for node in nodes:
        labels = node.metadata.labels
        assert (labels["nvidia.com/mig.config"], labels.get("nvidia.com/mig.config.state")) == (LAYOUT, "success"), \
            node.metadata.name
