"""Processes the sim runs beside a cluster, detached, on this machine (Kueue's manager, Karpenter, the DCGM
exporter, Prometheus): started with a pid file and a log under the cluster's dir, found again through /proc
(never a pid alone: procs.py), ready when their health endpoint says so; upstream controllers' CRDs applied
from the tool cache."""

from __future__ import annotations

import logging
import os
import socket
import subprocess
import time
import urllib.error
import urllib.request
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from gpuctl.simulator.kwok import KwokCluster
from gpuctl.simulator.procs import Proc, all_procs, kill_and_wait, read_argv
from gpuctl.tools.installer import find_tool
from gpuctl.util.errors import ClusterError, WaitTimeout
from gpuctl.util.files import write_atomic

log = logging.getLogger(__name__)


def free_port() -> int:
    """A TCP port free on 127.0.0.1 now."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def apply_crds(cluster: str, crds: Path, what: str) -> bool:
    """Server-side apply each CRD in `crds` (files <group>_<plural>.yaml) the cluster does not serve yet and wait
    until they are Established; True if any was missing."""
    kubectl = [str(find_tool("kubectl")), "--kubeconfig", str(KwokCluster(cluster).kubeconfig_path)]
    if not missing_crds(cluster, crds):
        return False
    proc = subprocess.run([*kubectl, "apply", "--server-side", "--force-conflicts", "--field-manager", "gpuctl",
                           "-f", str(crds)], capture_output=True, text=True, timeout=300)
    if proc.returncode == 0:  # served only once established
        proc = subprocess.run([*kubectl, "wait", "--for=condition=Established", "--timeout=60s", "-f", str(crds)],
                              capture_output=True, text=True, timeout=120)
    if proc.returncode != 0:
        raise ClusterError(f"applying {what}'s CRDs to sim cluster {cluster!r} failed: {proc.stderr.strip()}",
                           "see the cluster's kube-apiserver log")
    return True


def missing_crds(cluster: str, crds: Path) -> set[str]:
    """The CRDs in `crds` (files <group>_<plural>.yaml) the cluster does not serve, as <plural>.<group>."""
    kubectl = [str(find_tool("kubectl")), "--kubeconfig", str(KwokCluster(cluster).kubeconfig_path)]
    probe = subprocess.run([*kubectl, "get", "crd", "-o", "name"], capture_output=True, text=True, timeout=120)
    have = {name.rpartition("/")[2] for name in probe.stdout.split()}
    return {f"{p.stem.split('_', 1)[1]}.{p.stem.split('_', 1)[0]}" for p in crds.glob("*.yaml")} - have


@dataclass(frozen=True)
class Daemon:
    """One detached process beside a sim cluster: where its pid and log go, and how its command line is known
    (`ours`), so that one is found again whatever its pid file says."""

    pid_file: Path
    log_path: Path
    ours: Callable[[tuple[str, ...]], bool]

    def procs(self) -> list[Proc]:
        """Every process of this machine that is this daemon (this process aside)."""
        return [p for p in all_procs() if p.pid != os.getpid() and self.ours(p.argv)]

    def pid(self) -> int | None:
        """Its pid when the pid file names a live process whose command line is `ours`; None otherwise."""
        try:
            pid = int(self.pid_file.read_text().strip())
        except (OSError, ValueError):
            return None
        argv = read_argv(pid)
        return pid if argv is not None and self.ours(argv) else None

    def keep(self, current: Callable[[Proc], bool]) -> Proc | None:
        """The first running one that is `current`, named by the pid file; every other one stopped. None where
        none is current (start one)."""
        procs = self.procs()
        kept = next((p for p in procs if current(p)), None)
        kill_and_wait([p for p in procs if p is not kept])
        if kept is not None and self.pid() != kept.pid:
            write_atomic(self.pid_file, f"{kept.pid}\n")
        return kept

    def start(self, argv: list[str], env: dict[str, str]) -> int:
        """Start `argv` in its own session, appending to the log, and record its pid in the pid file."""
        self.pid_file.parent.mkdir(mode=0o700, parents=True, exist_ok=True)
        self.log_path.parent.mkdir(parents=True, exist_ok=True)
        log.info("starting %s", " ".join(argv))
        with os.fdopen(os.open(self.log_path, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o600), "a") as log_file:
            proc = subprocess.Popen(argv, env=env, stdin=subprocess.DEVNULL, stdout=log_file,
                                    stderr=subprocess.STDOUT, start_new_session=True, umask=0o077)
        # Popen returns when exec has closed its pipe, which is before the kernel has set the new program's
        # command line: until then /proc/<pid>/cmdline is empty and the pid would not read as ours.
        deadline = time.monotonic() + 5.0
        while read_argv(proc.pid) is None and proc.poll() is None and time.monotonic() < deadline:
            time.sleep(0.01)
        write_atomic(self.pid_file, f"{proc.pid}\n")
        return proc.pid

    def stop(self) -> None:
        """Stop every one, whether or not the pid file names it."""
        kill_and_wait(self.procs())
        self.pid_file.unlink(missing_ok=True)


def log_tail(path: Path, lines: int = 3) -> str:
    if not path.exists():
        return ""
    return " | ".join(path.read_text(errors="replace").strip().splitlines()[-lines:])


def wait_ready(url: str, running: Callable[[], bool], what: str, log_path: Path, timeout: float) -> None:
    """Block until `url` answers 200; ClusterError as soon as the process is not `running`, WaitTimeout after
    `timeout` seconds."""
    opener = urllib.request.build_opener(urllib.request.ProxyHandler({}))  # 127.0.0.1: never through a proxy
    deadline = time.monotonic() + timeout
    while True:
        if not running():
            raise ClusterError(f"{what} exited: {log_tail(log_path)}", f"its log is {log_path}")
        try:
            with opener.open(url, timeout=2) as response:
                if response.status == 200:
                    return
        except (urllib.error.URLError, OSError):
            pass
        if time.monotonic() > deadline:
            raise WaitTimeout(f"{what} is not ready after {timeout:.0f}s", f"its log is {log_path}")
        time.sleep(0.2)
