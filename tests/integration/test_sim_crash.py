"""kill -9 at any point of `cluster create --cloud sim` or `apply -f`: the next run converges in normal
time, with no duplicate process, no pending Helm release and no held Lease; the run after it changes
nothing; `cluster delete`, also right after a crash, leaves no process and no file.

Kill points are deterministic: GPUCTL_SIM_CRASH_AT=<point> makes gpuctl SIGKILL itself at a named
point of the sim provider (gpuctl/simulator/kwok.py, crash_point), or the test kills it when a
state it waits for appears (a component's pid file, a Helm release pending install).
"""

from __future__ import annotations

import json
import os
import signal
import stat
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.conftest import run_gpuctl
from tests.integration.conftest import sim_spec
from tests.support.sim import COMPONENTS, KwokCluster, operator_stamp, workdir
from tests.support.tools import find_tool
from tests.support.util import data_dir

pytestmark = pytest.mark.integration

RERUN_LIMIT_S = 60.0  # a whole create takes about 15 s on a 2-core machine; a lease or a helm wait is 300 s
CREATE = ("cluster", "create", "--cloud", "sim", "--gpu", "t4", "--nodes", "1", "--slices", "2")


# -- what is left of a cluster, read from /proc and the disk without gpuctl's own code ---------------

def _argv(pid: str) -> list[str]:
    try:
        return Path(f"/proc/{pid}/cmdline").read_bytes().decode(errors="replace").split("\0")[:-1]
    except OSError:
        return []  # gone, or a zombie: not running


def cluster_processes(name: str) -> list[list[str]]:
    """Every live process that works for the sim cluster `name` of this state dir."""
    cluster_dir = str(KwokCluster(name).dir)
    found = []
    for entry in Path("/proc").iterdir():
        argv = _argv(entry.name) if entry.name.isdigit() and int(entry.name) != os.getpid() else []
        line = " ".join(argv)
        if argv and (cluster_dir in line or f"gpuctl-sim-{name}" in line
                     or (Path(argv[0]).name == "kwokctl" and f"--name {name} " in line + " ")):
            found.append(argv)
    return found


def leftover_files(name: str) -> list[Path]:
    """The cluster dir, and any file of the work dir named after the cluster (<name>.kwokctl.yaml...)."""
    root = workdir()
    return sorted(p for p in root.rglob("*") if p.name == name or p.name.startswith(f"{name}.")) if root.exists() else []


def assert_one_of_each(name: str) -> None:
    """Exactly one process per control-plane component and one simulated operator: no duplicate."""
    cluster_dir = KwokCluster(name).dir
    argvs = cluster_processes(name)
    components = sorted(Path(a[0]).name for a in argvs if Path(a[0]).parent == cluster_dir / "bin")
    operators = [a for a in argvs if "gpuctl.simulator.operator" in a]
    others = [a for a in argvs if Path(a[0]).parent != cluster_dir / "bin" and a not in operators]
    assert components == sorted(COMPONENTS), argvs
    assert len(operators) == 1, operators
    assert others == [], others


def assert_private_keys(name: str) -> None:
    keys = list(KwokCluster(name).dir.rglob("*.key"))
    assert {p.name for p in keys} >= {"ca.key", "admin.key"}
    for key in keys:
        assert stat.S_IMODE(key.stat().st_mode) == 0o600, key


def assert_no_pending_release_and_no_lease(name: str) -> None:
    kubeconfig = str(KwokCluster(name).kubeconfig_path)
    # Helm 4 lists releases in every state unless a state flag is given (it has no --all): helm.sh/helm/v4@v4.3.1
    # pkg/action/list.go SetStateMask, so a pending or failed release shows here.
    helm = subprocess.run([str(find_tool("helm")), "--kubeconfig", kubeconfig, "list", "-A", "-o", "json"],
                          capture_output=True, text=True, timeout=60)
    assert helm.returncode == 0, helm.stderr
    releases = json.loads(helm.stdout)
    assert sorted(r["name"] for r in releases) == ["gpu-operator", "node-feature-discovery"], releases
    assert {r["status"] for r in releases} == {"deployed"}, releases
    kubectl = subprocess.run([str(find_tool("kubectl")), "--kubeconfig", kubeconfig, "get", "lease", "-n",
                              "kube-system", "gpuctl-apply", "--ignore-not-found", "-o", "name"],
                             capture_output=True, text=True, timeout=60)
    assert kubectl.returncode == 0 and kubectl.stdout == "", kubectl.stdout + kubectl.stderr


def settle_code_changes(name: str, args: list[str], env: dict[str, str]) -> None:
    """Rerun until the operator runs the code on disk. An edit of its code between two runs restarts
    it (by design), which a working tree edited while the tests run would otherwise turn into a
    spurious change; an unstable stamp still fails the assertions that follow."""
    for _ in range(3):
        argv = _argv(str(KwokCluster(name).pids().get("gpuctl-sim-operator", 0)))
        if "--stamp" in argv and argv[argv.index("--stamp") + 1] == operator_stamp.__wrapped__():
            return
        run_gpuctl(*args, env=env, timeout=300)


# -- ways to crash --------------------------------------------------------------------------------

def command(name: str, how: str, tmp_path: Path) -> list[str]:
    if how == "apply":
        spec = tmp_path / f"{name}.yaml"
        spec.write_text(sim_spec(name, "{name: gpu, gpu: t4, nodes: 1, sharing: {timeSlicing: {replicas: 2}}}"))
        return ["-o", "json", "apply", "-f", str(spec), "--lock-timeout", "120"]
    return ["-o", "json", *CREATE, "--name", name]


def crash_at(point: str, args: list[str], env: dict[str, str]) -> None:
    """gpuctl kills itself (SIGKILL) at a named point of the sim provider."""
    proc = run_gpuctl(*args, env=dict(env, GPUCTL_SIM_CRASH_AT=point), timeout=300)
    assert proc.returncode == -signal.SIGKILL, f"no crash at {point}: rc {proc.returncode}\n{proc.stderr}"


def kill_when(ready: Callable[[], bool], args: list[str], env: dict[str, str], group: bool) -> None:
    """Run gpuctl and SIGKILL it as soon as `ready()`: alone (its kwokctl or helm goes on, orphaned) or
    with its process group (kwokctl and helm die with it, as in a kill of the terminal's job)."""
    proc = subprocess.Popen([sys.executable, "-m", "gpuctl", *args], env=env, stdout=subprocess.DEVNULL,
                            stderr=subprocess.DEVNULL, start_new_session=True)
    deadline = time.monotonic() + 300
    while not ready():
        assert proc.poll() is None, f"gpuctl ended (rc {proc.returncode}) before the kill point"
        assert time.monotonic() < deadline, "kill point never reached"
        time.sleep(0.01)
    if group:
        os.killpg(proc.pid, signal.SIGKILL)
    else:
        proc.kill()
    assert proc.wait() == -signal.SIGKILL


def component_started(name: str, component: str) -> Callable[[], bool]:
    return lambda: (KwokCluster(name).dir / "pids" / f"{component}.pid").exists()


def release_pending(name: str) -> Callable[[], bool]:
    """A Helm release exists in state pending-install (helm is installing it). Read with an API client, a LIST of
    a few milliseconds: at the sim's client rates a one-node release is ready within a second, a window a kubectl
    process per look (hundreds of milliseconds on a loaded machine) could miss."""
    from kubernetes import client, config

    kubeconfig = KwokCluster(name).kubeconfig_path
    api: list[Any] = []

    def ready() -> bool:
        if not api:
            if not kubeconfig.exists():
                return False
            try:
                api.append(client.CoreV1Api(config.new_client_from_config(str(kubeconfig))))
            except Exception:  # noqa: BLE001 - written in place by kwokctl: not whole yet
                return False
        try:
            found = api[0].list_secret_for_all_namespaces(label_selector="owner=helm,status=pending-install",
                                                          _request_timeout=5, _preload_content=False)
        except Exception:  # noqa: BLE001 - the API server is not up yet
            return False
        return bool(json.loads(found.data)["items"])

    return ready


CRASHES: dict[str, Callable[[str, list[str], dict[str, str]], None]] = {
    # gpuctl dies right after starting `kwokctl create`, which goes on without it
    "during kwokctl create": lambda n, a, e: crash_at("kwokctl-create", a, e),
    # gpuctl and kwokctl die while kwokctl starts the components: some run, some without a pid file
    "while components start": lambda n, a, e: kill_when(component_started(n, "kube-apiserver"), a, e, group=True),
    # kwokctl done; the kwok controller stopped to load gpuctl's Stages, kwok.yaml not rewritten yet
    "while adding the stages": lambda n, a, e: crash_at("stages", a, e),
    "after cluster up, before the system node": lambda n, a, e: crash_at("system-node", a, e),
    "before the operator starts": lambda n, a, e: crash_at("operator-start", a, e),
    # `apply -f`: gpuctl dies holding the Lease while helm installs; helm goes on, orphaned
    "during helm install": lambda n, a, e: kill_when(release_pending(n), a, e, group=False),
    # ... or helm dies with it: the release stays pending-install
    "during helm install, helm too": lambda n, a, e: kill_when(release_pending(n), a, e, group=True),
}


@pytest.fixture
def crash_env(sim_env: dict[str, str], tmp_path: Path) -> dict[str, str]:
    return dict(sim_env, KUBECONFIG=str(tmp_path / "kubeconfig"))


@pytest.mark.parametrize("point", list(CRASHES))
def test_rerun_after_a_kill_converges_and_delete_leaves_nothing(point: str, crash_env: dict[str, str],
                                                                 tmp_path: Path) -> None:
    name = f"crash{list(CRASHES).index(point)}"
    args = command(name, "apply" if "helm" in point else "create", tmp_path)
    CRASHES[point](name, args, crash_env)
    try:
        started = time.monotonic()
        rerun = run_gpuctl(*args, env=crash_env, timeout=300)
        took = time.monotonic() - started
        print(f"\n{point}: rerun took {took:.1f}s\n{rerun.stderr}")
        assert rerun.returncode == 0, rerun.stderr
        assert took < RERUN_LIMIT_S, rerun.stderr
        assert "waiting for another gpuctl" not in rerun.stderr  # the killed one's lock died with it
        # kwokctl had not finished: the cluster is made again; later, what is missing is added
        assert ("half-made" in rerun.stderr) == (point in ("during kwokctl create", "while components start"))

        settle_code_changes(name, args, crash_env)
        again = run_gpuctl(*args, env=crash_env, timeout=300)
        assert again.returncode == 0, again.stderr
        result = json.loads(again.stdout)
        assert result["changed"] is False, again.stderr
        assert {s["outcome"] for s in result["steps"]} == {"no change"}, again.stderr
        assert_one_of_each(name)
        assert_no_pending_release_and_no_lease(name)
        assert_private_keys(name)
    finally:
        deleted = run_gpuctl("cluster", "delete", "--cloud", "sim", "--name", name, "--yes", env=crash_env)
    assert deleted.returncode == 0, deleted.stderr
    assert cluster_processes(name) == []
    assert leftover_files(name) == []


@pytest.mark.parametrize("point", ["during kwokctl create", "while components start", "during helm install"])
def test_delete_right_after_a_kill_leaves_nothing(point: str, crash_env: dict[str, str], tmp_path: Path) -> None:
    name = f"gone{list(CRASHES).index(point)}"
    args = command(name, "apply" if point == "during helm install" else "create", tmp_path)
    CRASHES[point](name, args, crash_env)
    assert KwokCluster(name).exists
    listed = {c["name"]: c for c in json.loads(run_gpuctl("cluster", "list", "--cloud", "sim", "-o", "json",
                                                          env=crash_env).stdout)}
    # killed during helm install, the control plane runs but the apply did not finish (gpuctl.ops.unfinished)
    assert listed[name]["status"] == "incomplete"
    delete = ["cluster", "delete", "--cloud", "sim", "--name", name, "--yes"]
    crash_at("delete", delete, crash_env)  # and the delete itself is killed, its processes gone, its files not
    assert cluster_processes(name) == [] and KwokCluster(name).exists
    listed = {c["name"]: c for c in json.loads(run_gpuctl("cluster", "list", "--cloud", "sim", "-o", "json",
                                                          env=crash_env).stdout)}
    assert listed[name]["status"] == "incomplete"  # a create would make it again, a delete finishes it
    deleted = run_gpuctl(*delete, env=crash_env)
    assert deleted.returncode == 0, deleted.stderr
    assert cluster_processes(name) == []  # the orphaned helm of the last case included
    assert leftover_files(name) == []


# -- a complete cluster whose pieces went missing -------------------------------------------------

@pytest.fixture(scope="module")
def repaired(sim_env: dict[str, str], tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[str, dict[str, str]]]:
    env = dict(sim_env, KUBECONFIG=str(tmp_path_factory.mktemp("repair") / "kubeconfig"))
    proc = run_gpuctl(*CREATE, "--name", "repair", "--no-validate", env=env)
    assert proc.returncode == 0, proc.stderr
    assert "half-made" not in proc.stderr and "sim cluster 'repair'" not in proc.stderr  # nothing to repair
    yield "repair", env
    assert run_gpuctl("cluster", "delete", "--cloud", "sim", "--name", "repair", "--yes", env=env).returncode == 0
    assert cluster_processes("repair") == []
    assert leftover_files("repair") == []


def _ensure_cluster_outcome(name: str, env: dict[str, str], settle: bool = False) -> str:
    args = ["-o", "json", *CREATE, "--name", name, "--no-validate"]
    if settle:
        settle_code_changes(name, args, env)
    proc = run_gpuctl(*args, env=env)
    assert proc.returncode == 0, proc.stderr
    return {s["step"]: s["outcome"] for s in json.loads(proc.stdout)["steps"]}["ensure-cluster"]


def _stranger() -> subprocess.Popen[bytes]:
    """A process of someone else's, to be given a pid file's pid (the kernel reuses pids)."""
    return subprocess.Popen(["sleep", "300"])


def test_a_stale_pid_file_naming_a_stranger_is_not_trusted(repaired: tuple[str, dict[str, str]]) -> None:
    name, env = repaired
    kwok = KwokCluster(name)
    stranger = _stranger()
    try:
        for component in ("gpuctl-sim-operator", "kube-scheduler"):
            pid = kwok.pids()[component]
            os.kill(pid, signal.SIGKILL)
            while _argv(str(pid)):
                time.sleep(0.02)
            (kwok.dir / "pids" / f"{component}.pid").write_text(str(stranger.pid))
        assert _ensure_cluster_outcome(name, env) == "started"
        assert stranger.poll() is None  # not killed, not mistaken for ours
        assert_one_of_each(name)
        assert kwok.pids()["gpuctl-sim-operator"] != stranger.pid
        assert _ensure_cluster_outcome(name, env, settle=True) == "no change"
    finally:
        stranger.kill()
        stranger.wait()


def test_an_operator_of_other_code_is_replaced(repaired: tuple[str, dict[str, str]]) -> None:
    name, env = repaired
    kwok = KwokCluster(name)
    old = kwok.pids()["gpuctl-sim-operator"]
    argv = _argv(str(old))
    os.kill(old, signal.SIGKILL)
    stamp = argv.index("--stamp") + 1
    argv[stamp] = "0.0.1+older"  # as an older gpuctl started it
    outdated = subprocess.Popen(argv, stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, start_new_session=True)
    (kwok.dir / "pids" / "gpuctl-sim-operator.pid").write_text(str(outdated.pid))
    assert _ensure_cluster_outcome(name, env) == "updated"
    assert outdated.wait(timeout=10) == -signal.SIGKILL
    assert_one_of_each(name)
    assert _argv(str(kwok.pids()["gpuctl-sim-operator"]))[stamp] != "0.0.1+older"


def test_a_kill_during_kwokctl_start_is_repaired(repaired: tuple[str, dict[str, str]]) -> None:
    name, env = repaired
    kwok = KwokCluster(name)
    os.kill(kwok.pids()["kube-apiserver"], signal.SIGKILL)
    crash_at("kwokctl-start", ["-o", "json", *CREATE, "--name", name, "--no-validate"], env)
    assert _ensure_cluster_outcome(name, env) in {"started", "no change"}  # the orphaned kwokctl may finish first
    assert_one_of_each(name)
    assert _ensure_cluster_outcome(name, env, settle=True) == "no change"


def test_overlapping_reruns_after_a_crash_make_one_cluster(repaired: tuple[str, dict[str, str]]) -> None:
    name, env = repaired
    kwok = KwokCluster(name)
    subprocess.run([str(find_tool("kubectl")), "--kubeconfig", str(kwok.kubeconfig_path), "delete", "node",
                    "system-0", "--wait=false"], capture_output=True, timeout=60, check=True)
    os.kill(kwok.pids()["gpuctl-sim-operator"], signal.SIGKILL)
    crash_at("system-node", ["-o", "json", *CREATE, "--name", name, "--no-validate"], env)
    args = [sys.executable, "-m", "gpuctl", "-o", "json", *CREATE, "--name", name, "--no-validate"]
    runs = [subprocess.Popen(args, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True) for _ in range(2)]
    outcomes = []
    for run in runs:
        stdout, stderr = run.communicate(timeout=300)
        assert run.returncode == 0, stderr
        outcomes.append({s["step"]: s["outcome"] for s in json.loads(stdout)["steps"]}["ensure-cluster"])
    assert sorted(outcomes) == ["no change", "updated"]
    assert_one_of_each(name)


def test_a_cluster_of_an_older_gpuctl_is_adopted_and_brought_up_to_date(repaired: tuple[str, dict[str, str]]) -> None:
    """No marker, Stages appended the old way, keys 0644, an operator without a stamp: as gpuctl left
    clusters before it was crash safe. The cluster is kept (not made again) and brought up to date."""
    name, env = repaired
    kwok = KwokCluster(name)
    nodes_before = subprocess.run([str(find_tool("kubectl")), "--kubeconfig", str(kwok.kubeconfig_path), "get",
                                   "nodes", "-o", "jsonpath={.items[*].metadata.uid}"],
                                  capture_output=True, text=True, timeout=60, check=True).stdout
    config = kwok.dir / "kwok.yaml"
    stages = (data_dir("templates") / "sim" / "stages.yaml").read_text()
    base = config.read_text().partition("# gpuctl's kwok Stages follow")[0]
    assert base != config.read_text()
    config.write_text(base.rstrip() + "\n---\n" + stages)
    (kwok.dir / "gpuctl-created").unlink()
    for key in kwok.dir.rglob("*.key"):
        key.chmod(0o644)
    old = kwok.pids()["gpuctl-sim-operator"]
    argv = _argv(str(old))
    os.kill(old, signal.SIGKILL)
    legacy = subprocess.Popen(argv[:argv.index("--stamp")], stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL,
                              start_new_session=True)
    (kwok.dir / "pids" / "gpuctl-sim-operator.pid").write_text(str(legacy.pid))

    assert _ensure_cluster_outcome(name, env) == "started"  # the kwok controller, to load the rewritten Stages
    assert legacy.wait(timeout=10) == -signal.SIGKILL
    assert (kwok.dir / "gpuctl-created").exists()
    text = config.read_text()
    assert text.count("# gpuctl's kwok Stages follow") == 1 and text.count("name: gpuctl-cuda-sample-exit") == 1
    assert_private_keys(name)
    assert_one_of_each(name)
    assert _ensure_cluster_outcome(name, env, settle=True) == "no change"
    nodes_after = subprocess.run([str(find_tool("kubectl")), "--kubeconfig", str(kwok.kubeconfig_path), "get",
                                  "nodes", "-o", "jsonpath={.items[*].metadata.uid}"],
                                 capture_output=True, text=True, timeout=60, check=True).stdout
    assert nodes_after == nodes_before  # the same cluster, not a new one
