"""Run one sim cluster's control plane with `kwokctl --runtime binary`.

kwokctl starts etcd, kube-apiserver, kube-controller-manager, kube-scheduler and the kwok
controller as detached processes with pid files under <workdir>/clusters/<name>/pids, so the
cluster outlives the gpuctl command that created it.
"""

from __future__ import annotations

import logging
import os
import signal
import socket
import subprocess
import sys
import time
from contextlib import ExitStack
from pathlib import Path

import yaml

from gpuctl.errors import ClusterError
from gpuctl.output import info
from gpuctl.paths import state_dir
from gpuctl.resources import data_dir
from gpuctl.templating import render_template
from gpuctl.tools.installer import ensure_tools
from gpuctl.tools.pins import KUBERNETES_VERSION, SIM_TOOLS

log = logging.getLogger(__name__)

_PORTS = ("apiserver", "etcd", "etcd_peer", "kwok_controller", "controller_manager", "scheduler")


def workdir() -> Path:
    """KWOK_WORKDIR for every sim cluster: kept apart from the user's own ~/.kwok."""
    return state_dir() / "sim" / "kwok"


def _free_ports() -> dict[str, int]:
    # kwokctl's own choice scans down from 32766 and can race between clusters: pick our own.
    with ExitStack() as stack:
        ports = {}
        for name in _PORTS:
            sock = stack.enter_context(socket.socket(socket.AF_INET, socket.SOCK_STREAM))
            sock.bind(("127.0.0.1", 0))
            ports[name] = sock.getsockname()[1]
        return ports


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    # A zombie (exited, not yet reaped) is not running.
    try:
        return Path(f"/proc/{pid}/stat").read_text().split(")")[-1].split()[0] != "Z"
    except OSError:
        return True


class KwokCluster:
    """One kwokctl-managed control plane, addressed by cluster name."""

    def __init__(self, name: str) -> None:
        self.name = name
        self.dir = workdir() / "clusters" / name

    @property
    def exists(self) -> bool:
        return (self.dir / "kwok.yaml").exists()

    @property
    def kubeconfig_path(self) -> Path:
        return self.dir / "kubeconfig.yaml"

    def pids(self) -> dict[str, int]:
        pids = {}
        for pid_file in sorted((self.dir / "pids").glob("*.pid")):
            try:
                pids[pid_file.stem] = int(pid_file.read_text().strip())
            except (OSError, ValueError):
                continue
        return pids

    def running(self) -> bool:
        pids = self.pids()
        return bool(pids) and all(_alive(p) for p in pids.values())

    def endpoint(self) -> str | None:
        if not self.kubeconfig_path.exists():
            return None
        doc = yaml.safe_load(self.kubeconfig_path.read_text())
        return doc["clusters"][0]["cluster"]["server"]

    def _kwokctl(self, *args: str, apiserver_args: dict[str, str] | None = None) -> None:
        tools = {t.name: t.path for t in ensure_tools(SIM_TOOLS, info)}
        env = dict(
            os.environ,
            KWOK_WORKDIR=str(workdir()),
            # kwokctl edits $KUBECONFIG on create/delete; gpuctl manages the user's own file itself.
            KUBECONFIG=str(workdir() / "kwokctl-scratch.kubeconfig"),
            # kwokctl looks kubectl up on PATH before its configured binary: put the pinned one first.
            PATH=f"{tools['kubectl'].parent}{os.pathsep}{os.environ.get('PATH', '')}",
        )
        config_args: list[str] = []
        if args[0] == "create":
            config = workdir() / f"{self.name}.kwokctl.yaml"
            config.parent.mkdir(parents=True, exist_ok=True)
            config.write_text(render_template(
                "sim/kwokctl.yaml.j2", kube_version=KUBERNETES_VERSION, ports=_free_ports(),
                binaries={n: str(p.resolve()) for n, p in tools.items()}, apiserver_args=apiserver_args or {}))
            config_args = ["--config", str(config)]
        command = [str(tools["kwokctl"]), "--name", self.name, *config_args, *args]
        log.info("running %s (KWOK_WORKDIR=%s)", " ".join(command), env["KWOK_WORKDIR"])
        proc = subprocess.run(command, env=env, capture_output=True, text=True)
        log.debug("kwokctl output: %s", proc.stderr + proc.stdout)
        if proc.returncode != 0:
            lines = [l for l in (proc.stderr + proc.stdout).splitlines() if l.strip()]
            raise ClusterError(f"kwokctl {' '.join(args)} failed: {lines[-1] if lines else proc.returncode}",
                               f"component logs are in {self.dir / 'logs'}")

    def create(self, apiserver_args: dict[str, str] | None = None) -> None:
        """Start a new control plane; `apiserver_args` adds kube-apiserver flags (e.g. a token webhook)."""
        self._kwokctl("create", "cluster", apiserver_args=apiserver_args)
        self._add_stages()

    def _add_stages(self) -> None:
        """Append gpuctl's Stage to the default ones kwokctl saved, and restart the kwok controller
        to load them (supplying any Stage at create time would replace kwok's defaults instead)."""
        config = self.dir / "kwok.yaml"
        config.write_text(config.read_text().rstrip() + "\n---\n" + (data_dir("templates") / "sim" / "stages.yaml").read_text())
        pid = self.pids().get("kwok-controller")
        if pid is not None and _alive(pid):
            os.kill(pid, signal.SIGKILL)
            while _alive(pid):
                time.sleep(0.05)
        # kwokctl skips a component whose pid still exists, and a zombie's does until it is reaped.
        (self.dir / "pids" / "kwok-controller.pid").unlink(missing_ok=True)
        self._kwokctl("start", "cluster")

    def start(self) -> None:
        self._kwokctl("start", "cluster")

    def delete(self) -> None:
        """Stop every process of the cluster and remove its work dir."""
        pids = self.pids()
        if self.dir.exists():
            self._kwokctl("delete", "cluster")
        for pid in pids.values():  # kwokctl SIGKILLs them; make sure nothing survived
            if _alive(pid):
                os.kill(pid, signal.SIGKILL)

    @property
    def operator_pid_file(self) -> Path:
        # Beside kwokctl's own pid files, so running() and delete() treat it as one more component.
        return self.dir / "pids" / "gpuctl-sim-operator.pid"

    def ensure_operator(self) -> bool:
        """Start the simulated GPU operator unless it runs; return True if it was started."""
        pid = self.pids().get(self.operator_pid_file.stem)
        if pid is not None and _alive(pid):
            return False
        log_file = (self.dir / "logs" / "gpuctl-sim-operator.log").open("a")
        proc = subprocess.Popen(
            [sys.executable, "-m", "gpuctl.providers.sim.operator", "--kubeconfig", str(self.kubeconfig_path),
             "--logs", str(self.dir / "sim-logs")],
            stdin=subprocess.DEVNULL, stdout=log_file, stderr=subprocess.STDOUT, start_new_session=True)
        log_file.close()
        self.operator_pid_file.write_text(str(proc.pid))
        return True

    def log_tail(self, component: str = "kube-apiserver", lines: int = 3) -> str:
        log = self.dir / "logs" / f"{component}.log"
        if not log.exists():
            return ""
        return " | ".join(log.read_text(errors="replace").strip().splitlines()[-lines:])


def cluster_names() -> list[str]:
    root = workdir() / "clusters"
    if not root.is_dir():
        return []
    return sorted(p.name for p in root.iterdir() if (p / "kwok.yaml").exists())
