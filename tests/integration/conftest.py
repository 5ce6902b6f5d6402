"""One sim cluster per test session, created and deleted through the real `gpuctl` command."""

from __future__ import annotations

import json
import os
import subprocess
import time
from collections.abc import Callable, Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from tests.conftest import run_gpuctl
from tests.support.sim import KwokCluster, cluster_names
from tests.support.tools import SIM_TOOLS, ensure_tools, find_tool

CLUSTER = "itest"


def sim_spec(name: str, group: str, operator: str = "") -> str:
    """A GpuCluster spec for the sim: one node group (a YAML flow mapping), and spec.gpuOperator if given."""
    text = (f"apiVersion: gpuctl.dev/v1alpha1\nkind: GpuCluster\nmetadata: {{name: {name}}}\nspec:\n"
            f"  provider: {{cloud: sim}}\n  nodeGroups:\n    - {group}\n")
    return text + (f"  gpuOperator: {operator}\n" if operator else "")


@dataclass(frozen=True)
class SimCluster:
    name: str
    kubeconfig: Path
    env: dict[str, str]

    def core(self):
        from kubernetes import client, config

        return client.CoreV1Api(config.new_client_from_config(str(self.kubeconfig)))

    def gpuctl(self, *args: str) -> subprocess.CompletedProcess[str]:
        """The real `gpuctl` on this cluster, as a user runs it."""
        return run_gpuctl("--kubeconfig", str(self.kubeconfig), *args, env=self.env)

    def tool(self, name: str, *args: str, stdin: str | None = None) -> str:
        """A pinned tool (kubectl, helm) on this cluster; its stdout, after asserting it succeeded."""
        proc = subprocess.run([str(find_tool(name)), "--kubeconfig", str(self.kubeconfig), *args], env=self.env,
                              capture_output=True, text=True, timeout=120, input=stdin)
        assert proc.returncode == 0, (name, args, proc.stderr)
        return proc.stdout

    def kubectl(self, *args: str, stdin: str | None = None) -> str:
        return self.tool("kubectl", *args, stdin=stdin)

    def node(self, name: str) -> dict[str, Any]:
        return json.loads(self.kubectl("get", "node", name, "-o", "json"))


@contextmanager
def own_cluster(sim_env: dict[str, str], tmp_path_factory: pytest.TempPathFactory, name: str,
                *create: str) -> Iterator[SimCluster]:
    """A sim cluster of the module's own, made by `gpuctl cluster create --name NAME CREATE...` in a kubeconfig of
    its own and deleted at the end."""
    kubeconfig = tmp_path_factory.mktemp(name) / "kubeconfig"
    made = SimCluster(name, kubeconfig, dict(sim_env, KUBECONFIG=str(kubeconfig)))
    proc = made.gpuctl("cluster", "create", "--cloud", "sim", "--name", name, *create)
    try:
        assert proc.returncode == 0, proc.stderr
        yield made
    finally:
        proc = run_gpuctl("cluster", "delete", "--cloud", "sim", "--name", name, "--yes", env=made.env)
        assert proc.returncode == 0, proc.stderr


@contextmanager
def spec_cluster(sim_env: dict[str, str], tmp_path_factory: pytest.TempPathFactory, name: str,
                 spec: str) -> Iterator[tuple[dict[str, str], Path, dict[str, Any]]]:
    """A sim cluster of the module's own, made by `gpuctl -o json apply -f` of `spec` (its metadata.name is
    `name`) in a kubeconfig of its own: (env, the spec file, apply's JSON); deleted at the end."""
    home = tmp_path_factory.mktemp(name)
    env = dict(sim_env, KUBECONFIG=str(home / "kubeconfig"))
    path = home / "spec.yaml"
    path.write_text(spec)
    try:
        proc = run_gpuctl("-o", "json", "apply", "-f", str(path), env=env)
        assert proc.returncode == 0, proc.stderr
        yield env, path, json.loads(proc.stdout)
    finally:
        assert run_gpuctl("cluster", "delete", "--cloud", "sim", "--name", name, "--yes", env=env).returncode == 0


def await_value(what: str, read: Callable[[], Any], wanted: Any, timeout: float = 60.0) -> None:
    """Poll `read()` until it returns `wanted` (a decision of the sim's agents or a controller), or fail naming
    what it last read."""
    deadline = time.monotonic() + timeout
    while (got := read()) != wanted:
        assert time.monotonic() < deadline, f"{what}: still {got!r} after {timeout:.0f}s, wanted {wanted!r}"
        time.sleep(0.3)


SIM_VARIABLES = ("GPUCTL_STATE_DIR", "KUBECONFIG")


@contextmanager
def sim_environ(env: Mapping[str, str]) -> Iterator[None]:
    """This process's os.environ with `env`'s gpuctl state dir and default kubeconfig, restored on exit:
    for gpuctl code run in-process (KwokCluster, SimProvider, cluster_names, `run`)."""
    with pytest.MonkeyPatch.context() as patch:
        for key in SIM_VARIABLES:
            patch.setenv(key, env[key])
        yield


@pytest.fixture(scope="session")
def sim_env(tmp_path_factory: pytest.TempPathFactory) -> Iterator[dict[str, str]]:
    """The environment to run gpuctl in: gpuctl state and the default kubeconfig in temp dirs; tools from
    the shared user cache, installed when absent (never skipped: the first run builds them).
    It leaves os.environ alone: this process gets the two variables only for one module at a time
    (`_sim_environ`), so nothing collected after tests/integration (tests/unit) sees them.
    """
    ensure_tools(SIM_TOOLS, progress=print)
    root = tmp_path_factory.mktemp("sim")
    env = dict(os.environ, GPUCTL_STATE_DIR=str(root / "state"), KUBECONFIG=str(root / "kube" / "config"))
    yield env
    # A test that failed half-way may leave a cluster: no process outlives the session.
    with sim_environ(env):
        for name in cluster_names():
            KwokCluster(name).delete()


@pytest.fixture(scope="module", autouse=True)
def _sim_environ(sim_env: dict[str, str]) -> Iterator[None]:
    """Each module under tests/integration (every one needs the sim) runs, module-scoped fixtures
    included, with sim_env's state dir and kubeconfig in os.environ; they are restored at its end.
    Autouse: set up before the module's other module-scoped fixtures, torn down after them."""
    with sim_environ(sim_env):
        yield


@pytest.fixture(scope="session")
def sim_cluster(sim_env: dict[str, str], tmp_path_factory: pytest.TempPathFactory) -> Iterator[SimCluster]:
    kubeconfig = tmp_path_factory.mktemp("kubeconfig") / "itest.yaml"
    proc = run_gpuctl("--kubeconfig", str(kubeconfig), "-o", "json", "cluster", "create", "--cloud", "sim",
                      "--name", CLUSTER, "--gpu", "a100-40gb", "--nodes", "3", env=sim_env)
    assert proc.returncode == 0, proc.stderr
    result = json.loads(proc.stdout)
    assert [s["outcome"] for s in result["steps"]][:3] == ["created", "created", "updated"]
    yield SimCluster(CLUSTER, kubeconfig, sim_env)
    proc = run_gpuctl("cluster", "delete", "--cloud", "sim", "--name", CLUSTER, "--yes", env=sim_env)
    assert proc.returncode == 0, proc.stderr


# --- clusters shared by family ---------------------------------------------------------------------------
# A cluster costs 20-90 s; the modules that need the same kind of cluster share one session-scoped fixture
# (built the first time a test asks for it, deleted at the session's end). A test that changes a shared cluster
# puts it back before it returns (and proves it where the next check depends on it); a test that proves
# first-run behaviour, or breaks its cluster, keeps a cluster of its own and says why in its docstring.
PLATFORM_SPEC = Path(__file__).resolve().parents[1] / "specs" / "readme-platform.yaml"


@dataclass(frozen=True)
class Platform:
    """The README's example spec (docs/specs.md; tests/specs/readme-platform.yaml) on one fresh cluster."""
    env: dict[str, str]  # for gpuctl: the platform's own state dir and kubeconfig
    first_plan: Any  # `plan -f`'s JSON before the cluster existed
    first_run: dict[str, Any]  # `apply -f`'s JSON the first time, on the fresh cluster
    first_run_s: float


@pytest.fixture(scope="session")
def platform(sim_env: dict[str, str], tmp_path_factory: pytest.TempPathFactory) -> Iterator[Platform]:
    """The stack family's cluster: the README's spec (two node groups, time-slicing and MIG, the GPU Operator with
    standalone NFD, two tenants) applied once, the first time, to a cluster made for it in a state dir of its own
    (so whatever else the session runs, that first apply is a first run). Shared by test_apply, test_readme_spec and
    test_plan_matches_apply; a test that changes it applies the spec again before it returns."""

    root = tmp_path_factory.mktemp("platform")
    env = dict(sim_env, GPUCTL_STATE_DIR=str(root / "state"), KUBECONFIG=str(root / "kubeconfig"))
    plan = run_gpuctl("-o", "json", "plan", "-f", str(PLATFORM_SPEC), env=env)
    assert plan.returncode == 0, plan.stderr
    started = time.monotonic()
    proc = run_gpuctl("-o", "json", "apply", "-f", str(PLATFORM_SPEC), env=env)
    took = time.monotonic() - started
    try:
        assert proc.returncode == 0, proc.stderr
        yield Platform(env, json.loads(plan.stdout), json.loads(proc.stdout), took)
    finally:
        proc = run_gpuctl("cluster", "delete", "--cloud", "sim", "--name", "platform", "--yes", env=env)
        assert proc.returncode == 0, proc.stderr


BED_PASSWORD = "bed-demo-password"


@pytest.fixture(scope="session")
def openstack_bed(sim_env: dict[str, str], tmp_path_factory: pytest.TempPathFactory):
    """Real Keystone + Magnum (tests/beds/openstack) whose clusters are sim clusters under sim_env's state dir;
    user `demo` (password BED_PASSWORD) in project `demo`, cluster template `gpu-template`. The first run
    builds the bed's venv (~/.cache/gpuctl/tools/openstack-bed-<sha>); the services' logs stay in the
    bed's dir (printed here, and named by every start error)."""
    from tests.beds.openstack.bed import OpenStackBed

    bed = OpenStackBed(password=BED_PASSWORD, workdir=tmp_path_factory.mktemp("openstack-bed"))
    with sim_environ(sim_env):  # the bed's services and data plane take this process's environment
        bed.start()
    print(f"\nOpenStack bed up in {bed.setup_s:.1f}s ({', '.join(f'{k} {v:.1f}s' for k, v in bed.timings.items())}); "
          f"Keystone {bed.auth_url}, Magnum {bed.magnum_url}; logs in {bed.log_dir}")
    try:
        yield bed
    finally:
        memory = ", ".join(f"{k} {v:.0f} MiB" for k, v in bed.memory_mb().items())
        bed.stop()
        print(f"\nOpenStack bed stopped (RSS at the end: {memory}); logs in {bed.log_dir}")
