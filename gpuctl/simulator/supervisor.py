"""Keep a sim cluster's control plane running, as the kubelet keeps a real control plane's static pods
running: a component that exited is started again, the way `kwokctl start cluster` starts it.

It runs inside the simulated operator (a thread of its own, so a frozen kube-apiserver that holds the
operator's requests does not hold it), which lives as long as the cluster. Without it a component that
exits between two gpuctl commands (kube-scheduler, kube-controller-manager or the kwok controller: no
client sees them) would leave pods unscheduled, unmade or never run until the next `apply` repairs the
cluster (kwok.py ensure_started), and the command waiting on them would time out minutes later.

- Supervised: etcd, kube-controller-manager, kube-scheduler and the kwok controller. Not the
  kube-apiserver: every client sees its death at once (a refused connection: gpuctl exits 5 naming it),
  and gpuctl restarts it through kwokctl, which also waits until it serves.
- A component is dead when its pid file is missing or names a process that is not that component of
  this cluster (/proc/<pid>/cmdline, procs.is_component): a pid is never trusted alone.
- It acts only while it holds the cluster's lock (kwok.py KwokCluster.lock, taken without waiting) and
  the cluster is complete (its `gpuctl-created` marker): a gpuctl that holds the lock is repairing,
  stopping (kwok.py ensure_stages stops the kwok controller on purpose) or deleting the cluster.
- A component is started as kwokctl v0.8.0 starts it (pkg/kwokctl/runtime/binary/cluster_operation.go
  startComponent, pkg/kwokctl/runtime/exec.go ForkExec): the binary, args, envs and work dir of its entry
  in the cluster's kwok.yaml, in a session of its own, its pid in <dir>/pids/<name>.pid and its output in
  <dir>/logs/<name>.log, appended to (kwokctl truncates it), so that the reason it died stays readable.
- One that keeps dying is started again after 1, 2, 4 ... 60 s, as the kubelet backs off a crash loop.
- Before a kwok controller is started again, the node Leases of the one that died are released
  (release_node_leases): a kwok controller holds each node's Lease under an identity of its own making
  (hostname + a new UUID per process, kwok v0.8.0 pkg/kwok/controllers/controller.go Identity) and
  manages a node only once it holds its Lease, taking over another holder's only when it expired
  (node_lease_controller.go sync, tryAcquireOrRenew); kwokctl gives them 200 s
  (--node-lease-duration-seconds=200), so pods on the nodes would not run for minutes.
"""

from __future__ import annotations

import fcntl
import logging
import os
import subprocess
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml

from gpuctl.kube.kube import Kube
from gpuctl.simulator.procs import is_component, read_argv
from gpuctl.util.files import write_atomic
from gpuctl.util.words import plural

log = logging.getLogger("gpuctl.sim.supervisor")

SUPERVISED = ("etcd", "kube-controller-manager", "kube-scheduler", "kwok-controller")
MARKER = "gpuctl-created"  # kwok.py MARKER: the cluster is complete (a delete removes it first)
CHECK_S = 1.0
NODE_LEASE_NAMESPACE = "kube-node-lease"
LEASE_REQUEST_TIMEOUT = (5.0, 10.0)  # connect, read: a frozen kube-apiserver holds the supervisor no longer
BACKOFF_MAX_S = 60.0
STABLE_S = 60.0  # a component that ran this long is no longer crash-looping


@dataclass
class _Backoff:
    restarts: int = 0
    last: float = 0.0


def component_pid(cluster_dir: Path, component: str) -> int | None:
    """The pid of a running control-plane component of the cluster in `cluster_dir`; None when its pid
    file is missing or names a process that is not that component (gone, a zombie, or its pid reused)."""
    try:
        pid = int((cluster_dir / "pids" / f"{component}.pid").read_text().strip())
    except (OSError, ValueError):
        return None
    argv = read_argv(pid)
    return pid if argv is not None and is_component(argv, cluster_dir, component) else None


def dead_components(cluster_dir: Path, components: tuple[str, ...] = SUPERVISED) -> list[str]:
    return [c for c in components if component_pid(cluster_dir, c) is None]


def kwokctl_component(cluster_dir: Path, component: str) -> dict[str, Any] | None:
    """The component's entry in the cluster's kwok.yaml (kwokctl's KwokctlConfiguration, which
    `kwokctl start cluster` starts components from); None if it has none."""
    try:
        documents = list(yaml.safe_load_all((cluster_dir / "kwok.yaml").read_text()))
    except (OSError, yaml.YAMLError):
        return None
    for doc in documents:
        if isinstance(doc, dict) and doc.get("kind") == "KwokctlConfiguration":
            return next((c for c in doc.get("components") or [] if isinstance(c, dict) and c.get("name") == component),
                        None)
    return None


def release_node_leases(kube: Kube) -> int:
    """Delete every node Lease (kube-node-lease) of the cluster `kube` talks to, in one request; the number
    deleted. Only for a sim cluster whose kwok controller is not running: it is their only holder (kwok runs
    with --manage-all-nodes, and no kubelet runs), and a new one creates each Lease again at once."""
    return kube.delete_all("coordination.k8s.io/v1", "Lease", NODE_LEASE_NAMESPACE, timeout=LEASE_REQUEST_TIMEOUT)


def start_component(cluster_dir: Path, component: str) -> subprocess.Popen[bytes]:
    """Start one component as kwokctl's ForkExec does; OSError or ValueError when it cannot be."""
    entry = kwokctl_component(cluster_dir, component)
    if entry is None or not entry.get("binary"):
        raise ValueError(f"kwok.yaml has no binary for {component}")
    binary = Path(entry["binary"])
    workdir = Path(entry.get("workDir") or cluster_dir)
    if not is_component((str(binary),), cluster_dir, component) or workdir != cluster_dir:
        raise ValueError(f"kwok.yaml runs {component} as {binary} in {workdir}, not from {cluster_dir / 'bin'}")
    env = dict(os.environ, **{e["name"]: str(e.get("value", "")) for e in entry.get("envs") or [] if "name" in e})
    (cluster_dir / "logs").mkdir(parents=True, exist_ok=True)
    fd = os.open(cluster_dir / "logs" / f"{component}.log", os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o600)
    with os.fdopen(fd, "ab") as log_file:
        proc = subprocess.Popen([str(binary), *map(str, entry.get("args") or [])], cwd=workdir, env=env,
                                stdin=subprocess.DEVNULL, stdout=log_file, stderr=subprocess.STDOUT,
                                start_new_session=True, umask=0o077)
    pid_file = cluster_dir / "pids" / f"{component}.pid"
    write_atomic(pid_file, str(proc.pid))  # as kwokctl writes it: the number alone
    return proc


class Supervisor:
    """Restarts the dead control-plane components of the sim cluster in `cluster_dir`
    (<workdir>/clusters/<name>, its lock <workdir>/<name>.lock)."""

    def __init__(self, cluster_dir: Path, before_start: dict[str, Callable[[], object]] | None = None,
                 clock: Callable[[], float] = time.monotonic) -> None:
        self.dir = cluster_dir
        self.before_start = before_start or {}  # component -> what to do before it is started again
        self.lock_path = cluster_dir.parent.parent / f"{cluster_dir.name}.lock"
        self.clock = clock
        self.backoff: dict[str, _Backoff] = {}
        self.children: list[subprocess.Popen[bytes]] = []

    @classmethod
    def for_kubeconfig(cls, kubeconfig: Path, kube: Kube) -> Supervisor | None:
        """The supervisor of the sim cluster whose kubeconfig this is (kwok.py: <dir>/kubeconfig.yaml),
        `kube` a Kube of it; None for any other kubeconfig (an operator run by hand elsewhere)."""
        cluster_dir = kubeconfig.resolve().parent
        if cluster_dir.parent.name != "clusters" or not (cluster_dir / "kwok.yaml").is_file():
            return None
        return cls(cluster_dir, {"kwok-controller": lambda: "released the "
                                 f"{plural(release_node_leases(kube), 'node Lease')} it held"})

    def _due(self, component: str, now: float) -> bool:
        backoff = self.backoff.get(component)
        if backoff is None or not backoff.restarts:
            return True
        return now - backoff.last >= min(BACKOFF_MAX_S, 2.0 ** (backoff.restarts - 1))

    def check(self) -> list[str]:
        """One look: start every dead component that is due; the components started."""
        for child in self.children:
            child.poll()  # reap the ones that exited (a zombie is dead to component_pid already)
        self.children = [c for c in self.children if c.returncode is None]
        now = self.clock()
        for component, backoff in self.backoff.items():
            if backoff.restarts and component_pid(self.dir, component) is not None and now - backoff.last > STABLE_S:
                backoff.restarts = 0
        dead = [c for c in dead_components(self.dir) if self._due(c, now)]
        if not dead:
            return []
        try:
            fd = os.open(self.lock_path, os.O_RDWR)  # never made here: a cluster without it is being deleted
        except OSError:
            return []
        started = []
        try:
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except BlockingIOError:
                return []  # a gpuctl works on the cluster: it repairs what it finds stopped
            if not (self.dir / MARKER).exists():
                return []  # half-made, or a delete began
            os.ftruncate(fd, 0)  # the holder, as kwok.py's lock names it to a gpuctl that waits
            os.pwrite(fd, f"{os.getpid()}\n".encode(), 0)
            for component in dead_components(self.dir):  # again, under the lock
                if component not in dead:
                    continue
                backoff = self.backoff.setdefault(component, _Backoff())
                if (prepare := self.before_start.get(component)) is not None:
                    try:
                        log.info("%s is not running: %s", component, prepare())
                    except Exception as exc:  # noqa: BLE001 - start it anyway; what it waits for expires
                        log.warning("%s is not running; preparing its start failed: %s", component, exc)
                try:
                    self.children.append(start_component(self.dir, component))
                except (OSError, ValueError) as exc:
                    log.error("%s is not running and cannot be started: %s", component, exc)
                    backoff.restarts += 1
                    backoff.last = now
                    continue
                backoff.restarts += 1
                backoff.last = now
                started.append(component)
                log.warning("%s was not running: started it again (pid %s; restart %d; log %s)", component,
                            self.children[-1].pid, backoff.restarts, self.dir / "logs" / f"{component}.log")
        finally:
            os.close(fd)  # and the lock with it
        return started

    def run(self, stop: threading.Event) -> None:
        while not stop.wait(CHECK_S):
            try:
                self.check()
            except Exception:
                log.exception("supervising the control plane failed")

    def start(self) -> threading.Event:
        """Supervise in a daemon thread; set the returned event to stop."""
        stop = threading.Event()
        threading.Thread(target=self.run, args=(stop,), name="control-plane-supervisor", daemon=True).start()
        return stop
