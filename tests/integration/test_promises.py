"""What a command promised holds when it returns (issue 18), on a sim cluster of this module's own:
- the GPU fence refuses bypass pods sent the instant `tenant add` returns, also on a loaded machine;
- a converged rerun clears an apply Lease whose holder is a dead gpuctl;
- a platform changed but never validated (a killed run) is validated by the rerun, once;
- a command about one node group keeps the others' taints and sharing in the cluster-wide settings;
- `nodegroup scale` gives new nodes their group's sharing; `validate` fails for a node without it;
- `tenant add`: omitted flags mean their defaults, --borrow needs Kueue, the output is the cluster's quota."""

from __future__ import annotations

import json
import socket
import subprocess
import sys
from collections.abc import Iterator

import pytest

from tests.conftest import run_gpuctl
from tests.integration.conftest import SimCluster
from tests.integration.test_tenant_fence import BYPASSES, refusal
from tests.support.ops import granted

pytestmark = pytest.mark.integration
NAME = "promises"


@pytest.fixture(scope="module")
def cluster(sim_env: dict[str, str], tmp_path_factory: pytest.TempPathFactory) -> Iterator[SimCluster]:
    kubeconfig = tmp_path_factory.mktemp("promises") / "kubeconfig"
    proc = run_gpuctl("--kubeconfig", str(kubeconfig), "cluster", "create", "--cloud", "sim", "--name", NAME,
                      "--gpu", "t4", "--nodes", "2", "--slices", "4", "--nodegroup-name", "shared", env=sim_env)
    assert proc.returncode == 0, proc.stderr
    yield SimCluster(NAME, kubeconfig, sim_env)
    run_gpuctl("cluster", "delete", "--cloud", "sim", "--name", NAME, "--yes", env=sim_env)


def gpuctl(cluster: SimCluster, *args: str) -> subprocess.CompletedProcess[str]:
    return run_gpuctl("--kubeconfig", str(cluster.kubeconfig), *args, env=cluster.env)


def create(cluster: SimCluster, *extra: str) -> subprocess.CompletedProcess[str]:
    return gpuctl(cluster, "-o", "json", "cluster", "create", "--cloud", "sim", "--name", NAME, "--gpu", "t4",
                  "--nodes", "2", "--slices", "4", "--nodegroup-name", "shared", *extra)


def outcomes(proc: subprocess.CompletedProcess[str]) -> dict[str, str]:
    assert proc.returncode == 0, proc.stderr
    return {s["step"]: s["outcome"] for s in json.loads(proc.stdout)["steps"]}


def test_the_fence_refuses_bypass_pods_the_moment_tenant_add_returns(cluster: SimCluster) -> None:
    burners = [subprocess.Popen([sys.executable, "-c", "while True: pass"]) for _ in range(2)]  # a loaded machine
    try:
        v1 = cluster.core()
        for i in range(4):
            team = f"fence-now-{i}"
            proc = gpuctl(cluster, "-v", "tenant", "add", team, "--gpus", "1")  # -v: how long the fence took
            assert proc.returncode == 0, proc.stderr
            admitted = [case for case, (_, body) in BYPASSES.items() if refusal(v1, team, body) is None]
            assert not admitted, f"admitted right after 'tenant add {team}' returned: {admitted}"
            assert "GPU fence in force" in proc.stderr and "waited" in proc.stderr, proc.stderr
    finally:
        for burner in burners:
            burner.kill()
            burner.wait()
    for i in range(4):
        assert gpuctl(cluster, "tenant", "remove", f"fence-now-{i}", "--yes").returncode == 0


def test_tenant_add_changes_only_what_its_flags_name(cluster: SimCluster) -> None:
    proc = gpuctl(cluster, "tenant", "add", "team-flags", "--gpus", "2", "--borrow", "2")
    assert proc.returncode == 2 and "--borrow" in proc.stderr and "Kueue" in proc.stderr, proc.stderr
    v1 = cluster.core()
    assert "team-flags" not in {ns.metadata.name for ns in v1.list_namespace().items}  # nothing written
    proc = gpuctl(cluster, "-o", "json", "tenant", "add", "team-flags", "--gpus", "2", "--mig", "1g.5gb=3")
    assert proc.returncode == 0, proc.stderr
    assert json.loads(proc.stdout)["quota"] == {"nvidia.com/gpu": 2, "nvidia.com/mig-1g.5gb": 3}
    proc = gpuctl(cluster, "-o", "json", "tenant", "add", "team-flags", "--gpus", "1")  # --mig omitted: kept
    assert proc.returncode == 0, proc.stderr
    assert json.loads(proc.stdout)["quota"] == {"nvidia.com/gpu": 1, "nvidia.com/mig-1g.5gb": 3}
    proc = gpuctl(cluster, "-o", "json", "tenant", "add", "team-flags", "--mig", "none")  # cleared
    assert proc.returncode == 0, proc.stderr
    held = v1.read_namespaced_resource_quota("gpuctl-gpu-quota", "team-flags").spec.hard
    assert granted(held) == {"requests.nvidia.com/gpu": "1"} and json.loads(proc.stdout)["quota"] == {"nvidia.com/gpu": 1}
    assert held["requests.nvidia.com/mig-1g.5gb"] == "0"  # a profile no longer given is refused, not unlimited
    assert gpuctl(cluster, "tenant", "remove", "team-flags", "--yes").returncode == 0


def test_a_converged_rerun_clears_a_dead_gpuctls_lease(cluster: SimCluster) -> None:
    from kubernetes import client, config

    leases = client.CoordinationV1Api(config.new_client_from_config(str(cluster.kubeconfig)))
    dead = subprocess.Popen(["true"])
    dead.wait()
    now = __import__("datetime").datetime.now(__import__("datetime").timezone.utc)
    leases.create_namespaced_lease("kube-system", {
        "apiVersion": "coordination.k8s.io/v1", "kind": "Lease", "metadata": {"name": "gpuctl-apply"},
        "spec": {"holderIdentity": f"{socket.gethostname()}/{dead.pid}/1.abcdef", "leaseDurationSeconds": 3600,
                 "acquireTime": now, "renewTime": now}})
    proc = create(cluster)
    assert set(outcomes(proc).values()) <= {"no change"}, proc.stdout
    assert "no longer running" in proc.stderr, proc.stderr
    names = [lease.metadata.name for lease in leases.list_namespaced_lease("kube-system").items]
    assert "gpuctl-apply" not in names


def test_a_platform_changed_but_never_validated_is_validated_by_the_rerun(cluster: SimCluster) -> None:
    v1 = cluster.core()
    # what a run killed between its writes and its smoke test leaves: the record emptied, nothing validated
    v1.patch_namespaced_config_map("gpuctl-validated", "gpu-operator", {"data": {"spec-sha256": ""}})
    steps = outcomes(create(cluster))
    assert steps["validate/shared"] == "passed", steps
    assert all(v == "no change" for k, v in steps.items() if not k.startswith("validate/")), steps
    assert outcomes(create(cluster))["validate/shared"] == "no change"  # validated since: left alone


def test_a_command_about_one_group_keeps_the_others_settings(cluster: SimCluster) -> None:
    proc = gpuctl(cluster, "-o", "json", "cluster", "create", "--cloud", "sim", "--name", NAME, "--gpu",
                  "a100-40gb", "--nodes", "1", "--nodegroup-name", "dedicated", "--taint",
                  "dedicated=training:NoSchedule", "--taint", "nvidia.com/gpu=true:NoSchedule")
    assert proc.returncode == 0, proc.stderr
    v1 = cluster.core()
    shared = [n for n in v1.list_node(label_selector="gpuctl.dev/nodegroup=shared").items]
    assert len(shared) == 2, [n.metadata.name for n in shared]
    # the first group keeps its time-slicing though this command named no --slices
    assert all(n.status.allocatable.get("nvidia.com/gpu") == "4" for n in shared)
    # and a rerun of the first group's command keeps the second group's taint tolerated
    outcomes(create(cluster))
    from kubernetes import client, config

    apps = client.AppsV1Api(config.new_client_from_config(str(cluster.kubeconfig)))
    plugin = apps.read_namespaced_daemon_set("nvidia-device-plugin-daemonset", "gpu-operator")
    tolerated = {(t.key, t.value) for t in plugin.spec.template.spec.tolerations or []}
    assert ("dedicated", "training") in tolerated, tolerated
    dedicated = v1.list_node(label_selector="gpuctl.dev/nodegroup=dedicated").items
    assert len(dedicated) == 1, [n.metadata.name for n in dedicated]
    assert all(n.status.allocatable.get("nvidia.com/gpu") == "8" for n in dedicated)


def test_scaled_nodes_carry_their_groups_sharing_and_validate_checks_each_node(cluster: SimCluster) -> None:
    proc = gpuctl(cluster, "nodegroup", "scale", "--cloud", "sim", "--cluster", NAME, "--name", "shared",
                  "--nodes", "3")
    assert proc.returncode == 0, proc.stderr
    v1 = cluster.core()
    nodes = v1.list_node(label_selector="gpuctl.dev/nodegroup=shared").items
    assert len(nodes) == 3
    assert all((n.metadata.labels or {}).get("nvidia.com/device-plugin.config") == "slice-4" for n in nodes)
    proc = gpuctl(cluster, "validate", "--nodegroup", "shared")
    assert proc.returncode == 0, proc.stdout + proc.stderr
    # a node that lost its group's sharing fails validation, however many GPUs the group has in sum
    v1.patch_node(nodes[-1].metadata.name, {"metadata": {"labels": {"nvidia.com/device-plugin.config": None}}})
    proc = gpuctl(cluster, "validate", "--nodegroup", "shared")
    assert proc.returncode == 6, proc.stdout + proc.stderr
    assert "node-config" in proc.stdout + proc.stderr and "slice-4" in proc.stdout + proc.stderr
    outcomes(create(cluster, "--nodes", "3"))  # apply puts it back
    assert gpuctl(cluster, "validate", "--nodegroup", "shared").returncode == 0

