"""A frozen kube-apiserver (SIGSTOPped: the kernel still accepts connections, nothing answers) ends
every command within its request deadline with exit 7 and a line naming the server; an
unreachable one (nothing listens) exits 5 at once. The deadlines are the defaults users get
(gpuctl/util/timeouts.py), except where a test says otherwise.
"""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import time
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.conftest import run_gpuctl
from tests.integration.conftest import sim_spec
from tests.support.sim import KwokCluster
from tests.support.util import CONNECT_S, READ_S, ExitCode

pytestmark = pytest.mark.integration

# One request: connect (TLS handshake included) plus the answer; and the Python start-up of a
# command on a busy 2-core machine.
DEADLINE_S = CONNECT_S + READ_S + 15


@pytest.fixture(scope="module")
def frozen_target(sim_env: dict[str, str], tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[str, Path]]:
    """A sim cluster of these tests' own (name and kubeconfig), deleted at the end."""
    name = f"frozen-{uuid.uuid4().hex[:6]}"
    kubeconfig = tmp_path_factory.mktemp("frozen") / "kubeconfig"
    proc = run_gpuctl("--kubeconfig", str(kubeconfig), "cluster", "create", "--cloud", "sim", "--name", name,
                      "--gpu", "t4", "--nodes", "1", "--no-validate", env=sim_env)
    assert proc.returncode == 0, proc.stderr
    try:
        yield name, kubeconfig
    finally:
        proc = run_gpuctl("cluster", "delete", "--cloud", "sim", "--name", name, "--yes", env=sim_env)
        assert proc.returncode == 0, proc.stderr


def _helm_processes() -> list[int]:
    found = []
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                if Path(os.readlink(entry / "exe")).name == "helm" and str(os.getpid()) in _ancestors(entry.name):
                    found.append(int(entry.name))
            except OSError:
                continue
    return found


def _ancestors(pid: str) -> list[str]:
    chain = []
    while pid not in ("0", "1"):
        try:
            pid = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[1]
        except (OSError, IndexError):
            break
        chain.append(pid)
    return chain


def test_frozen_apiserver_ends_each_command_with_exit_7(frozen_target: tuple[str, Path], sim_env: dict[str, str],
                                                         tmp_path: Path) -> None:
    name, kubeconfig = frozen_target
    cluster = KwokCluster(name)
    server = cluster.endpoint()
    assert server and server.startswith("https://127.0.0.1:")
    spec = tmp_path / "spec.yaml"
    spec.write_text(sim_spec(name, "{name: gpu, gpu: t4, nodes: 1}"))
    # apply first: frozen for long (about 15 s), kube-scheduler loses its leader lease and exits, and
    # apply would then restart it through kwokctl, which waits for the API server without a deadline.
    commands = {"apply": ["apply", "-f", str(spec)], "status": ["status"], "validate": ["validate"],
                "tenant list": ["tenant", "list"]}
    env = {k: v for k, v in sim_env.items() if k != "GPUCTL_REQUEST_TIMEOUT"}  # the defaults users get
    apiserver = cluster.pids()["kube-apiserver"]
    os.kill(apiserver, signal.SIGSTOP)
    try:
        started = time.monotonic()
        # All four at once: each must end by itself, within one request deadline.
        running = {label: subprocess.Popen([sys.executable, "-m", "gpuctl", "--kubeconfig", str(kubeconfig), *args],
                                           env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
                   for label, args in commands.items()}
        results = {}
        for label, proc in running.items():
            try:
                _, stderr = proc.communicate(timeout=DEADLINE_S + 30)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.communicate()
                pytest.fail(f"gpuctl {label} still running {DEADLINE_S + 30:.0f}s after the API server froze")
            results[label] = (proc.returncode, time.monotonic() - started, stderr)
        for label, (code, took, stderr) in results.items():
            assert code == ExitCode.TIMEOUT, f"{label}: {stderr}"
            assert took < DEADLINE_S, f"{label} took {took:.0f}s"
            lines = stderr.strip().splitlines()
            assert len(lines) == 1 and lines[0].startswith("error: "), f"{label}: {stderr}"
            assert f"the kube-apiserver at {server}" in lines[0] and "did not answer" in lines[0], lines[0]
        print({label: f"{took:.1f}s" for label, (_, took, _) in results.items()})

        # Helm (in this process, as apply runs it): its reads are bounded too, and no helm is left behind.
        from tests.support.model import StackSpec
        from tests.support.stack import HelmTarget, operator_release, plan_release
        from tests.support.util import RequestTimeout

        release = operator_release(StackSpec(charts="bundled"))
        with pytest.MonkeyPatch.context() as patch:
            patch.setenv("GPUCTL_REQUEST_TIMEOUT", "2")  # helm's reads: 4 s, under client-go's own 10 s handshake
            helm_started = time.monotonic()
            with pytest.raises(RequestTimeout, match=f"the kube-apiserver at {server}"):
                plan_release(HelmTarget(kubeconfig, None), release)
            assert time.monotonic() - helm_started < 15
        assert _helm_processes() == []
    finally:
        os.kill(apiserver, signal.SIGCONT)
    thawed = run_gpuctl("--kubeconfig", str(kubeconfig), "status", env=env)  # thawed, it answers again
    assert thawed.returncode == 0, thawed.stderr


def test_unreachable_apiserver_exits_5_at_once(frozen_target: tuple[str, Path], sim_env: dict[str, str],
                                               tmp_path: Path) -> None:
    name, kubeconfig = frozen_target
    server = KwokCluster(name).endpoint()
    assert server
    with socket.socket() as sock:  # a port nothing listens on
        sock.bind(("127.0.0.1", 0))
        closed = f"https://127.0.0.1:{sock.getsockname()[1]}"
    moved = tmp_path / "moved-kubeconfig"
    moved.write_text(kubeconfig.read_text().replace(server, closed))
    for args in (["status"], ["validate"], ["tenant", "list"]):
        started = time.monotonic()
        proc = run_gpuctl("--kubeconfig", str(moved), *args, env=sim_env, timeout=60)
        took = time.monotonic() - started
        assert proc.returncode == ExitCode.CLUSTER, proc.stderr
        assert took < 10, f"{args} took {took:.0f}s"
        assert proc.stderr.count("\n") == 1 and f"cannot connect to the kube-apiserver at {closed}" in proc.stderr
