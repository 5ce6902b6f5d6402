"""`gpuctl tenant add|list|remove` on the shared sim cluster (3 x a100-40gb nodes, 8 GPUs each)."""

from __future__ import annotations

import json
import time

import pytest

from tests.conftest import run_gpuctl
from tests.integration.conftest import SimCluster
from tests.support.ops import granted

pytestmark = pytest.mark.integration


def test_tenant_lifecycle(sim_cluster: SimCluster) -> None:
    base = ("--kubeconfig", str(sim_cluster.kubeconfig))
    add = ("tenant", "add", "team-a", "--gpus", "4", "--mig", "3g.20gb=2", "--group", "team-a-devs")
    proc = run_gpuctl(*base, "-o", "json", *add, env=sim_cluster.env)
    assert proc.returncode == 0, proc.stderr
    assert json.loads(proc.stdout)["change"] == "created"
    # No MIG layout on this cluster: the MIG quota is above allocatable, which warns but is allowed.
    assert "warning: nvidia.com/mig-3g.20gb quota 2 is above the cluster's allocatable 0" in proc.stderr

    from kubernetes import client, config

    api = config.new_client_from_config(str(sim_cluster.kubeconfig))
    v1, rbac = client.CoreV1Api(api), client.RbacAuthorizationV1Api(api)
    quota = v1.read_namespaced_resource_quota("gpuctl-gpu-quota", "team-a")
    assert granted(quota.spec.hard) == {"requests.nvidia.com/gpu": "4", "requests.nvidia.com/mig-3g.20gb": "2"}
    assert quota.spec.hard["requests.nvidia.com/mig-1g.5gb"] == "0"  # every profile it is not given: refused
    binding = rbac.read_namespaced_role_binding("gpuctl-tenant", "team-a")
    assert (binding.role_ref.name, [s.name for s in binding.subjects]) == ("edit", ["team-a-devs"])

    again = run_gpuctl(*base, "-o", "json", *add, env=sim_cluster.env)
    assert json.loads(again.stdout)["change"] == "no change"
    resize = run_gpuctl(*base, "-o", "json", "tenant", "add", "team-a", "--gpus", "6", "--mig", "3g.20gb=2",
                        "--group", "team-a-devs", env=sim_cluster.env)
    assert json.loads(resize.stdout)["change"] == "updated"

    pod = {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "trainer"},
           "spec": {"containers": [{"name": "c", "image": "example/train:1",
                                    "resources": {"limits": {"nvidia.com/gpu": "2"}}}]}}
    v1.create_namespaced_pod("team-a", pod)
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        rows = {r["tenant"]: r for r in json.loads(run_gpuctl(*base, "-o", "json", "tenant", "list",
                                                              env=sim_cluster.env).stdout)}
        if rows["team-a"]["used"].get("nvidia.com/gpu") == 2:
            break
        time.sleep(1)
    assert rows["team-a"]["quota"] == {"nvidia.com/gpu": 6, "nvidia.com/mig-3g.20gb": 2}
    assert rows["team-a"]["used"] == {"nvidia.com/gpu": 2, "nvidia.com/mig-3g.20gb": 0}
    assert rows["team-a"]["group"] == "team-a-devs"

    assert run_gpuctl(*base, "tenant", "remove", "team-a", env=sim_cluster.env).returncode == 2  # needs --yes
    proc = run_gpuctl(*base, "tenant", "remove", "team-a", "--yes", env=sim_cluster.env)
    assert proc.returncode == 0, proc.stderr
    assert "team-a" not in {ns.metadata.name for ns in v1.list_namespace().items}  # it waited for it to go
    missing = run_gpuctl(*base, "tenant", "remove", "kube-system", "--yes", env=sim_cluster.env)
    assert missing.returncode == 2 and "NAME: 'kube-system' is a system namespace" in missing.stderr


def test_bad_tenant_inputs(sim_cluster: SimCluster) -> None:
    for args, message in [(["Team_A!"], "NAME: 'Team_A!' is not a valid name"),
                          (["team-b", "--gpus", "-1"], "error: --gpus: '-1' is not a whole number"),
                          (["team-b", "--mig", "3g.20gb"], "--mig: '3g.20gb' is not PROFILE=COUNT"),
                          (["team-b", "--mig", "big=2"], "--mig: 'big' is not a MIG profile")]:
        proc = run_gpuctl("--kubeconfig", str(sim_cluster.kubeconfig), "tenant", "add", *args, env=sim_cluster.env)
        assert proc.returncode == 2 and message in proc.stderr, proc.stderr


def test_tenants_own_only_what_gpuctl_made(sim_cluster: SimCluster) -> None:
    from kubernetes import client, config

    base = ("--kubeconfig", str(sim_cluster.kubeconfig))
    v1 = client.CoreV1Api(config.new_client_from_config(str(sim_cluster.kubeconfig)))
    v1.create_namespace({"metadata": {"name": "ml-team", "labels": {"owner": "them"}}})
    v1.create_namespaced_config_map("ml-team", {"metadata": {"name": "theirs"}, "data": {"k": "v"}})

    refused = run_gpuctl(*base, "tenant", "add", "ml-team", "--gpus", "2", env=sim_cluster.env)
    assert refused.returncode == 2, refused.stderr
    assert "--adopt: namespace 'ml-team' exists and gpuctl did not create it" in refused.stderr
    assert v1.list_namespaced_resource_quota("ml-team").items == []  # nothing written
    assert "gpuctl.dev/tenant" not in (v1.read_namespace("ml-team").metadata.labels or {})

    adopted = run_gpuctl(*base, "-o", "json", "tenant", "add", "ml-team", "--gpus", "2", "--adopt",
                         "--group", "ml-devs", env=sim_cluster.env)
    assert adopted.returncode == 0, adopted.stderr
    listed = {r["tenant"] for r in json.loads(run_gpuctl(*base, "-o", "json", "tenant", "list",
                                                         env=sim_cluster.env).stdout)}
    assert "ml-team" in listed
    again = run_gpuctl(*base, "-o", "json", "tenant", "add", "ml-team", "--gpus", "2", "--group", "ml-devs",
                       env=sim_cluster.env)  # once adopted, a rerun without --adopt converges
    assert json.loads(again.stdout)["change"] == "no change", again.stderr

    removed = run_gpuctl(*base, "tenant", "remove", "ml-team", "--yes", env=sim_cluster.env)
    assert removed.returncode == 0, removed.stderr
    namespace = v1.read_namespace("ml-team")  # the team's namespace stays, with what the team put there
    assert namespace.status.phase == "Active" and namespace.metadata.labels.get("owner") == "them"
    assert "gpuctl.dev/tenant" not in namespace.metadata.labels
    assert v1.read_namespaced_config_map("theirs", "ml-team").data == {"k": "v"}
    assert v1.list_namespaced_resource_quota("ml-team").items == []
    again = run_gpuctl(*base, "tenant", "remove", "ml-team", "--yes", env=sim_cluster.env)
    assert again.returncode == 0 and "tenant 'ml-team': nothing to remove" in again.stderr, again.stderr
    v1.delete_namespace("ml-team")
