"""The processes of one sim cluster, found through /proc and never through a pid alone.

A pid file outlives its process (kill -9, a reboot) and the kernel hands its pid to the next
process that asks, so a pid is trusted only when /proc/<pid>/cmdline says the process is ours:
a control-plane binary kwokctl runs from the cluster's bin/ dir, the simulated operator with the
cluster's kubeconfig, or a kwokctl working on this cluster name in this work dir. The operator's
command line also names the code it runs (operator_stamp), so an outdated one is recognised.
"""

from __future__ import annotations

import functools
import hashlib
import os
import re
import shlex
import signal
import time
from dataclasses import dataclass
from pathlib import Path

from gpuctl import __version__

OPERATOR_MODULE = "gpuctl.simulator.operator"
DCGM_EXPORTER_MODULE = "gpuctl.simulator.dcgm_exporter"  # the sim's DCGM exporter (dcgm_exporter.py)
KILL_TIMEOUT_S = 10.0
# `from gpuctl.x import a, b` (names possibly in parentheses over several lines) and `import gpuctl.x`.
_FROM_IMPORT = re.compile(r"^[ \t]*from[ \t]+(gpuctl(?:\.\w+)*)[ \t]+import[ \t]+(\([^)]*\)|[^\n]*)", re.MULTILINE)
_IMPORT = re.compile(r"^[ \t]*import[ \t]+(gpuctl(?:\.\w+)*)", re.MULTILINE)


@dataclass(frozen=True)
class Proc:
    pid: int
    argv: tuple[str, ...]


def read_argv(pid: int) -> tuple[str, ...] | None:
    """The command line of a live process; None if it is gone or a zombie (its cmdline is empty)."""
    try:
        raw = Path(f"/proc/{pid}/cmdline").read_bytes()
    except OSError:
        return None
    return tuple(raw.decode(errors="replace").split("\0")[:-1]) or None


def _environ(pid: int) -> dict[str, str]:
    try:
        raw = Path(f"/proc/{pid}/environ").read_bytes()
    except OSError:
        return {}
    pairs = (item.partition("=") for item in raw.decode(errors="replace").split("\0") if item)
    return {key: value for key, _, value in pairs}


def flag(argv: tuple[str, ...], name: str) -> str | None:
    """The value of `--name value` or `--name=value`."""
    for i, arg in enumerate(argv):
        if arg == name and i + 1 < len(argv):
            return argv[i + 1]
        if arg.startswith(name + "="):
            return arg[len(name) + 1:]
    return None


def all_procs() -> list[Proc]:
    procs = []
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit() and (argv := read_argv(int(entry.name))) is not None:
            procs.append(Proc(int(entry.name), argv))
    return procs


def is_component(argv: tuple[str, ...], cluster_dir: Path, component: str | None = None) -> bool:
    """kwokctl runs each control-plane binary through the link <cluster dir>/bin/<component>."""
    binary = Path(argv[0])
    return binary.parent == cluster_dir / "bin" and (component is None or binary.name == component)


def is_operator(argv: tuple[str, ...], kubeconfig: Path) -> bool:
    return OPERATOR_MODULE in argv and flag(argv, "--kubeconfig") == str(kubeconfig)


def is_kwokctl(proc: Proc, workdir: Path, name: str) -> bool:
    """A kwokctl (create, start) of this cluster; its children (kubectl polls) name the cluster dir."""
    if Path(proc.argv[0]).name != "kwokctl" or flag(proc.argv, "--name") != name:
        return False
    return _environ(proc.pid).get("KWOK_WORKDIR") == str(workdir)


def is_helm(argv: tuple[str, ...], context: str) -> bool:
    """helm run by gpuctl (pyhelm3 runs it through `sh -c`) against the cluster's kubeconfig context."""
    if Path(argv[0]).name in ("sh", "bash", "dash") and len(argv) >= 3 and argv[1] == "-c":
        try:
            argv = tuple(shlex.split(argv[2]))
        except ValueError:
            return False
    return bool(argv) and Path(argv[0]).name == "helm" and flag(argv, "--kube-context") == context


def is_karpenter(argv: tuple[str, ...], cluster_dir: Path) -> bool:
    """The sim's Karpenter (karpenter.py) of the cluster at `cluster_dir`: the kwok provider binary, from the tool
    cache, reading its instance types from inside the cluster's dir."""
    types = flag(argv, "--instance-types-file-path") or ""
    return bool(argv) and Path(argv[0]).name == "karpenter-kwok" and types.startswith(str(cluster_dir) + os.sep)


def is_dcgm_exporter(argv: tuple[str, ...], kubeconfig: Path) -> bool:
    """The sim's DCGM exporter (dcgm_exporter.py) of the cluster whose kubeconfig is `kubeconfig`."""
    return DCGM_EXPORTER_MODULE in argv and flag(argv, "--kubeconfig") == str(kubeconfig)


def is_prometheus(argv: tuple[str, ...], cluster_dir: Path) -> bool:
    """The sim's Prometheus (prometheus.py) of the cluster at `cluster_dir`: the binary named prometheus, from
    the tool cache, reading its configuration from inside the cluster's dir."""
    config = flag(argv, "--config.file") or ""
    return bool(argv) and Path(argv[0]).name == "prometheus" and config.startswith(str(cluster_dir) + os.sep)


def cluster_procs(workdir: Path, name: str, helm_context: str | None = None) -> tuple[list[Proc], list[Proc]]:
    """(processes that drive the cluster, every other process of it) for the cluster `name` under
    `workdir`: drivers are kwokctl and, given its kubeconfig context, a helm a killed gpuctl left."""
    cluster_dir = workdir / "clusters" / name
    inside = str(cluster_dir) + os.sep
    drivers, others = [], []
    for proc in all_procs():
        if proc.pid == os.getpid():
            continue
        if is_kwokctl(proc, workdir, name) or (helm_context is not None and is_helm(proc.argv, helm_context)):
            drivers.append(proc)
        elif (is_component(proc.argv, cluster_dir) or is_operator(proc.argv, cluster_dir / "kubeconfig.yaml")
              or (Path(proc.argv[0]).name == "kubectl" and any(a.startswith(inside) for a in proc.argv[1:]))
              # the sim's Kueue manager (kueue.py) runs from the tool cache with a config inside the cluster's dir
              or (Path(proc.argv[0]).name == "kueue" and (flag(proc.argv, "--config") or "").startswith(inside))
              or is_karpenter(proc.argv, cluster_dir)
              or is_dcgm_exporter(proc.argv, cluster_dir / "kubeconfig.yaml") or is_prometheus(proc.argv, cluster_dir)):
            others.append(proc)
    return drivers, others


def _exists(proc: Proc) -> bool:
    """The process has not exited: neither gone nor a zombie, nor its pid taken by another process.
    A process that is exiting has an empty cmdline before it is a zombie: it is still there."""
    try:
        state = Path(f"/proc/{proc.pid}/stat").read_text().rpartition(")")[2].split()[0]
    except (OSError, IndexError):
        return False
    argv = read_argv(proc.pid)
    return state not in ("Z", "X") and (argv is None or argv == proc.argv)


def kill_and_wait(procs: list[Proc]) -> None:
    """SIGKILL each process that still runs the same command line, and wait until all have exited."""
    for proc in procs:
        if read_argv(proc.pid) == proc.argv:
            try:
                os.kill(proc.pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
    deadline = time.monotonic() + KILL_TIMEOUT_S
    while any(_exists(p) for p in procs) and time.monotonic() < deadline:
        time.sleep(0.02)


def kill_cluster_procs(workdir: Path, name: str, helm_context: str | None = None) -> list[Proc]:
    """Kill every process of the cluster: its drivers first, so that kwokctl starts no more components."""
    killed: list[Proc] = []
    for _ in range(5):
        drivers, others = cluster_procs(workdir, name, helm_context)
        if not drivers and not others:
            break
        kill_and_wait(drivers)
        kill_and_wait(others)
        killed += drivers + others
    return killed


def _module_file(root: Path, module: str) -> Path | None:
    base = root.joinpath(*module.split("."))
    for candidate in (base.with_suffix(".py"), base / "__init__.py"):
        if candidate.is_file():
            return candidate
    return None


@functools.cache
def operator_stamp() -> str:
    """The gpuctl version and a digest of the source of every gpuctl module the simulated operator
    imports: an operator started from other code is restarted (also one of an older gpuctl)."""
    return code_stamp(OPERATOR_MODULE)


def code_stamp(entry: str) -> str:
    """The gpuctl version and a digest of the source of module `entry` and every gpuctl module it imports: a sim
    process (the operator, the DCGM exporter) that runs other code is restarted."""
    root = Path(__file__).resolve().parents[2]  # holds the gpuctl package
    files: set[Path] = set()
    done: set[str] = set()
    todo = [entry]
    while todo:
        parts = todo.pop().split(".")
        for module in (".".join(parts[:i]) for i in range(1, len(parts) + 1)):  # and the packages on its way
            if module in done:
                continue
            done.add(module)
            if (path := _module_file(root, module)) is None:
                continue  # a name imported from a module, not a module
            files.add(path)
            text = path.read_text()
            todo += _IMPORT.findall(text)
            for parent, names in _FROM_IMPORT.findall(text):
                todo += [parent, *(f"{parent}.{n.split()[0]}" for n in names.strip("()").replace("\n", ",").split(",")
                                   if n.split() and n.split()[0].isidentifier())]
    digest = hashlib.sha256()
    for path in sorted(files):
        digest.update(path.relative_to(root).as_posix().encode() + b"\0" + path.read_bytes() + b"\0")
    return f"{__version__}+{digest.hexdigest()[:12]}"
