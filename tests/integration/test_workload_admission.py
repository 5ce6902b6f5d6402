"""Workloads land as upstream writes them (templates/policies/gpu-tolerations.yaml), on one sim cluster of two
node groups made by `apply -f`: a time-sliced T4 group labelled workload=inference and a MIG A100 group with
a second taint. The four manifests of docs/workloads.md (section "Four manifests as upstream writes them") are created unmodified in a tenant
namespace and the real controllers, admission chain and scheduler put their pods on the GPU nodes; the same
manifests elsewhere stay Pending; the policy follows the node groups and goes with the last tenant."""

from __future__ import annotations

import json
import re
import subprocess
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml

from tests.conftest import run_gpuctl
from tests.integration.conftest import spec_cluster
from tests.support.tools import find_tool

pytestmark = pytest.mark.integration
PAGE = Path(__file__).resolve().parents[2] / "docs" / "workloads.md"
CLUSTER = "workloads"
TEAM = "team-w"
SPEC = f"""apiVersion: gpuctl.dev/v1alpha1
kind: GpuCluster
metadata: {{name: {CLUSTER}}}
spec:
  provider: {{cloud: sim}}
  nodeGroups:
    - {{name: inference, gpu: t4, nodes: 2, sharing: {{timeSlicing: {{replicas: 4}}}}, labels: {{workload: inference}}}}
    - name: training
      gpu: a100-40gb
      nodes: 1
      sharing: {{mig: {{layout: 3g.20gb-2x2g.10gb}}}}
      taints: ["nvidia.com/gpu=true:NoSchedule", "dedicated=training:NoSchedule"]
  gpuOperator: {{migStrategy: mixed, validate: false}}
  tenants:
    - {{name: {TEAM}, gpus: 6, mig: {{2g.10gb: 2}}}}
"""
GPU_TAINT = {"key": "nvidia.com/gpu", "operator": "Equal", "value": "true", "effect": "NoSchedule"}
TRAINING_TAINT = {"key": "dedicated", "operator": "Equal", "value": "training", "effect": "NoSchedule"}


def documented_workloads() -> list[str]:
    """The manifests of docs/workloads.md's section "Four manifests as upstream writes them", in order."""
    section = PAGE.read_text().split("## Four manifests as upstream writes them", 1)[1].split("\n## ", 1)[0]
    return re.findall(r"```yaml\n(.*?)```", section, re.S)


def kubectl_apply(env: dict[str, str], manifest: str, namespace: str) -> None:
    """`kubectl -n NAMESPACE apply -f FILE`, as docs/workloads.md tells a team."""
    subprocess.run([str(find_tool("kubectl")), "-n", namespace, "apply", "-f", "-"], input=manifest, env=env,
                   check=True, capture_output=True, text=True)


@pytest.fixture(scope="module")
def cluster(sim_env: dict[str, str], tmp_path_factory: pytest.TempPathFactory) -> Iterator[dict[str, str]]:
    with spec_cluster(sim_env, tmp_path_factory, CLUSTER, SPEC) as (env, _, first):
        steps = {s["step"]: s["outcome"] for s in first["steps"]}
        assert steps["ensure-gpu-tolerations"] == "created"  # before the tenant's namespace exists
        yield env


def api(env: dict[str, str]) -> Any:
    from kubernetes import config

    return config.new_client_from_config(env["KUBECONFIG"])


def v1(env: dict[str, str]) -> Any:
    from kubernetes import client

    return client.CoreV1Api(api(env))


def until(what: str, check: Callable[[], Any], timeout: float = 60) -> Any:
    deadline = time.monotonic() + timeout
    while not (found := check()):
        assert time.monotonic() < deadline, f"{what} not within {timeout}s"
        time.sleep(0.2)
    return found


def pod(name: str, resources: dict[str, str] | None = None, **spec: Any) -> dict[str, Any]:
    container: dict[str, Any] = {"name": "main", "image": "nvcr.io/nvidia/cuda:12.9.1-base-ubuntu24.04"}
    if resources:
        container["resources"] = {"limits": resources}
    return {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": name}, "spec": {"containers": [container], **spec}}


def dry_run(env: dict[str, str], body: dict[str, Any], namespace: str = TEAM) -> list[dict[str, Any]]:
    """The tolerations the API server gives `body`, created with dryRun=All (admission in full, nothing stored)."""
    made = v1(env).create_namespaced_pod(namespace, body, dry_run="All", _preload_content=False)
    return json.loads(made.data)["spec"].get("tolerations") or []


def gpu_tolerations(tolerations: list[dict[str, Any]]) -> list[dict[str, Any]]:
    return [t for t in tolerations if not t.get("key", "").startswith("node.kubernetes.io/")]


def node_group_of(env: dict[str, str], node: str) -> str | None:
    return (v1(env).read_node(node).metadata.labels or {}).get("gpuctl.dev/nodegroup")


def pods_of(env: dict[str, str], namespace: str) -> dict[str, Any]:
    return {p.metadata.name: p for p in v1(env).list_namespaced_pod(namespace).items}


def test_upstream_manifests_land_on_the_time_sliced_gpus(cluster: dict[str, str]) -> None:
    workloads = documented_workloads()
    assert [yaml.safe_load(w)["kind"] for w in workloads] == ["Deployment", "Job", "StatefulSet", "Pod"]
    for text in workloads:  # as written upstream: gpuctl's fields are the platform's to add
        assert "toleration" not in text and "kueue.x-k8s.io" not in text and "nodeSelector" not in text
        kubectl_apply(cluster, text, TEAM)
    names = ("gpu-deployment-", "gpu-job-", "my-notebook-0", "raycluster-gpu-worker-")

    def scheduled() -> dict[str, Any] | None:
        found = {prefix: p for prefix in names for name, p in pods_of(cluster, TEAM).items()
                 if name.startswith(prefix) and p.spec.node_name}
        return found if len(found) == len(names) else None

    for prefix, placed in until("every workload's pod scheduled", scheduled).items():
        assert node_group_of(cluster, placed.spec.node_name) == "inference", prefix
        tolerations = [t.to_dict() for t in placed.spec.tolerations]
        assert any({k: v for k, v in t.items() if v is not None} == GPU_TAINT for t in tolerations), prefix


def test_a_cpu_pod_gets_no_gpu_toleration_and_stays_off_gpu_nodes(cluster: dict[str, str]) -> None:
    assert gpu_tolerations(dry_run(cluster, pod("cpu"))) == []
    assert gpu_tolerations(dry_run(cluster, pod("zero", {"nvidia.com/gpu": "0"}))) == []
    v1(cluster).create_namespaced_pod(TEAM, pod("cpu-only", {"cpu": "100m"}))
    placed = until("the CPU pod scheduled", lambda: v1(cluster).read_namespaced_pod("cpu-only", TEAM).spec.node_name)
    assert node_group_of(cluster, placed) is None


def test_a_mig_pod_lands_on_the_mig_node(cluster: dict[str, str]) -> None:
    body = pod("mig", {"nvidia.com/mig-2g.10gb": "1"})
    assert gpu_tolerations(dry_run(cluster, body)) == [TRAINING_TAINT, GPU_TAINT]
    v1(cluster).create_namespaced_pod(TEAM, body)
    placed = until("the MIG pod scheduled", lambda: v1(cluster).read_namespaced_pod("mig", TEAM).spec.node_name)
    assert node_group_of(cluster, placed) == "training"


def test_a_mig_profile_the_team_is_not_given_is_refused_by_its_quota(cluster: dict[str, str]) -> None:
    from kubernetes.client.exceptions import ApiException

    # the node has free 3g.20gb instances, the team only 2g.10gb ones: a quota naming no 3g.20gb would not limit it
    with pytest.raises(ApiException) as refused:
        v1(cluster).create_namespaced_pod(TEAM, pod("other-profile", {"nvidia.com/mig-3g.20gb": "1"}))
    assert refused.value.status == 403 and "exceeded quota" in str(refused.value.body)
    assert "requests.nvidia.com/mig-3g.20gb=0" in str(refused.value.body)


def test_the_pods_own_tolerations_and_node_selector_win(cluster: dict[str, str]) -> None:
    gpu = {"nvidia.com/gpu": "1"}
    # ExtendedResourceToleration (EKS turns it on) has already added this one: no second toleration of the key
    ert = {"key": "nvidia.com/gpu", "operator": "Exists", "effect": "NoSchedule"}
    assert gpu_tolerations(dry_run(cluster, pod("ert", gpu, tolerations=[ert]))) == [ert, TRAINING_TAINT]
    assert gpu_tolerations(dry_run(cluster, pod("all", gpu, tolerations=[{"operator": "Exists"}]))) == [
        {"operator": "Exists"}]
    # a node selector of the time-sliced group's labels: the training group's taint is not the pod's business
    assert gpu_tolerations(dry_run(cluster, pod("sel", gpu, nodeSelector={"workload": "inference"}))) == [GPU_TAINT]
    assert gpu_tolerations(dry_run(cluster, pod("other", gpu, nodeSelector={"gpuctl.dev/nodegroup": "training",
                                                                             "topology.kubernetes.io/zone": "a"}))) \
        == [TRAINING_TAINT, GPU_TAINT]
    claim = pod("claim", resourceClaims=[{"name": "gpu", "resourceClaimTemplateName": "gpu-t4"}])
    claim["spec"]["containers"][0]["resources"] = {"claims": [{"name": "gpu"}]}
    assert gpu_tolerations(dry_run(cluster, claim)) == [TRAINING_TAINT, GPU_TAINT]
    init = pod("init", initContainers=[{"name": "warm", "image": "busybox:1.37",
                                         "resources": {"limits": gpu}}])
    assert gpu_tolerations(dry_run(cluster, init)) == [TRAINING_TAINT, GPU_TAINT]


def test_a_bypass_pod_is_still_refused_after_the_mutation(cluster: dict[str, str]) -> None:
    from kubernetes.client.exceptions import ApiException

    body = pod("priv", {"nvidia.com/gpu": "1"})
    body["spec"]["containers"][0]["securityContext"] = {"privileged": True}
    with pytest.raises(ApiException) as refused:
        dry_run(cluster, body)
    assert refused.value.status == 403 and "gpuctl GPU fence (rule privileged)" in refused.value.body


def test_the_same_manifests_elsewhere_stay_pending(cluster: dict[str, str]) -> None:
    v1(cluster).create_namespace({"metadata": {"name": "outsider"}})
    kubectl_apply(cluster, documented_workloads()[0], "outsider")  # the Deployment

    def unschedulable() -> Any:
        for p in pods_of(cluster, "outsider").values():
            conditions = {c.type: c for c in p.status.conditions or []}
            if "PodScheduled" in conditions and conditions["PodScheduled"].reason == "Unschedulable":
                return p
        return None

    held = until("the outsider's pod found unschedulable", unschedulable)
    assert gpu_tolerations([t.to_dict() for t in held.spec.tolerations]) == []
    assert "untolerated taint" in held.status.conditions[0].message


def test_the_policy_follows_the_node_groups(cluster: dict[str, str]) -> None:
    extra = {"key": "pool", "operator": "Equal", "value": "extra", "effect": "NoSchedule"}
    where = ("--cloud", "sim", "--cluster", CLUSTER, "--name", "extra")
    body = pod("extra", {"nvidia.com/gpu": "1"}, nodeSelector={"gpuctl.dev/nodegroup": "extra"})
    assert gpu_tolerations(dry_run(cluster, body)) == []  # no group offers it: nothing to tolerate
    added = run_gpuctl("nodegroup", "add", *where, "--gpu", "l4", "--taint", "pool=extra:NoSchedule", env=cluster)
    assert added.returncode == 0, added.stderr
    assert gpu_tolerations(dry_run(cluster, body)) == [extra]  # in force when the command returns
    deleted = run_gpuctl("nodegroup", "delete", *where, "--yes", env=cluster)
    assert deleted.returncode == 0, deleted.stderr
    assert gpu_tolerations(dry_run(cluster, body)) == []


def test_plan_and_render_show_the_policy(cluster: dict[str, str], tmp_path: Path) -> None:
    spec = tmp_path / "spec.yaml"
    spec.write_text(SPEC)
    plan = run_gpuctl("-o", "json", "plan", "-f", str(spec), env=cluster)
    assert plan.returncode == 0, plan.stderr
    assert {s["step"]: s["action"] for s in json.loads(plan.stdout)}["ensure-gpu-tolerations"] == "no change"
    rendered = run_gpuctl("render", "-f", str(spec), "--out", str(tmp_path / "out"), env=cluster)
    assert rendered.returncode == 0, rendered.stderr
    [policy] = (tmp_path / "out" / "manifests").glob("16-mutatingadmissionpolicy-*.yaml")
    assert "dedicated" in policy.read_text()
    assert len(list((tmp_path / "out" / "manifests").glob("1[56]-*.yaml"))) == 4  # fence and tolerations


def test_the_last_tenant_takes_the_policy_along(cluster: dict[str, str]) -> None:
    from kubernetes import client

    assert run_gpuctl("tenant", "remove", TEAM, "--yes", env=cluster).returncode == 0
    admission = client.AdmissionregistrationV1Api(api(cluster))
    assert not [p for p in admission.list_mutating_admission_policy().items
                if p.metadata.name == "gpuctl-gpu-tolerations"]
