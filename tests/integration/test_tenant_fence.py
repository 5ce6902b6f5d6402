"""The GPU fence of tenant namespaces (templates/fences/gpu-fence.yaml), enforced by the sim's real
kube-apiserver: every way to reach GPUs without requesting them is refused with the policy's message,
normal pods are admitted, and namespaces gpuctl did not onboard are untouched. Pods are sent with
dryRun=All: admission runs in full, nothing is stored."""

from __future__ import annotations

import json
import time
from collections.abc import Iterator
from typing import Any

import pytest

from tests.conftest import run_gpuctl
from tests.integration.conftest import SimCluster

pytestmark = pytest.mark.integration
TEAM = "team-fence"
GPU = {"limits": {"nvidia.com/gpu": "1"}}
CLAIM = [{"name": "gpu", "resourceClaimTemplateName": "gpu-a100-40gb"}]  # DRA mode: a GPU from a tenant template


def pod(name: str, container: dict[str, Any] | None = None, **spec: Any) -> dict[str, Any]:
    annotations = spec.pop("annotations", None)
    body = {"name": "main", "image": "nvcr.io/nvidia/cuda:12.9.1-base-ubuntu24.04", **(container or {})}
    return {"apiVersion": "v1", "kind": "Pod",
            "metadata": {"name": name, **({"annotations": annotations} if annotations else {})},
            "spec": {"containers": [body], **spec}}


BYPASSES = {
    "env-all": ("device-env", pod("env", {"env": [{"name": "NVIDIA_VISIBLE_DEVICES", "value": "all"}]})),
    "env-from-field": ("device-env", pod("envref", {"env": [{"name": "NVIDIA_VISIBLE_DEVICES", "valueFrom": {
        "fieldRef": {"fieldPath": "metadata.name"}}}]})),
    "env-mig-in-init": ("device-env", pod("initenv", initContainers=[{
        "name": "init", "image": "busybox:1.37", "env": [{"name": "NVIDIA_MIG_CONFIG_DEVICES", "value": "all"}]}])),
    "env-with-a-gpu": ("device-env", pod("envgpu", {"resources": GPU, "env": [
        {"name": "NVIDIA_VISIBLE_DEVICES", "value": "all"}]})),
    "runtime-class": ("runtime-class", pod("rc", runtimeClassName="nvidia")),
    "runtime-class-cdi": ("runtime-class", pod("rccdi", runtimeClassName="nvidia-cdi")),
    "runtime-class-unused-claim": ("runtime-class", pod("rcclaim", runtimeClassName="nvidia", resourceClaims=CLAIM)),
    "cdi-annotation": ("cdi-annotation", pod("cdi", annotations={"nvidia.cdi.k8s.io/container.main": "nvidia.com/gpu=all"})),
    "cdi-standard": ("cdi-annotation", pod("cdistd", annotations={"cdi.k8s.io/gpu": "nvidia.com/gpu=all"})),
    "privileged": ("privileged", pod("priv", {"securityContext": {"privileged": True}})),
    "privileged-init": ("privileged", pod("privinit", initContainers=[{
        "name": "init", "image": "busybox:1.37", "securityContext": {"privileged": True}}])),
    "hostpath-gpu": ("host-devices", pod("hp", volumes=[{"name": "d", "hostPath": {"path": "/dev/nvidia0"}}])),
    "hostpath-dev": ("host-devices", pod("hpdev", volumes=[{"name": "d", "hostPath": {"path": "//dev/"}}])),
    "hostpath-root": ("host-devices", pod("hproot", volumes=[{"name": "d", "hostPath": {"path": "/"}}])),
    "hostpath-driver": ("host-devices", pod("hpdrv", volumes=[{"name": "d", "hostPath": {"path": "/run/nvidia/driver"}}])),
    "hostpath-dot": ("host-devices", pod("hpdot", volumes=[{"name": "d", "hostPath": {"path": "/./dev/nvidia0"}}])),
    "hostpath-parent": ("host-devices", pod("hprun", volumes=[{"name": "d", "hostPath": {"path": "/var/run/"}}])),
    "hostpath-proc": ("host-devices", pod("hpproc", volumes=[{"name": "d", "hostPath": {"path": "/proc/driver/nvidia"}}])),
}
ADMITTED = {
    "gpu": pod("gpu", {"resources": GPU}),
    "gpu-with-runtime-class": pod("gpurc", {"resources": GPU}, runtimeClassName="nvidia"),
    "mig": pod("mig", {"resources": {"limits": {"nvidia.com/mig-3g.20gb": "1"}}}),
    "claim-with-runtime-class": pod("claimrc", {"resources": {"claims": [{"name": "gpu"}]}}, runtimeClassName="nvidia",
                                    resourceClaims=CLAIM),
    "cpu": pod("cpu", {"env": [{"name": "NVIDIA_DRIVER_CAPABILITIES", "value": "compute,utility"},
                               {"name": "NVIDIA_VISIBLE_DEVICES", "value": "void"}]}),
    "cpu-host-data": pod("data", volumes=[{"name": "d", "hostPath": {"path": "/devices"}}]),
    "cpu-host-run-other": pod("runother", volumes=[{"name": "d", "hostPath": {"path": "/run/containerd/x.sock"}}]),
}


@pytest.fixture(scope="module")
def team(sim_cluster: SimCluster) -> Iterator[Any]:
    from kubernetes import client, config

    base = ("--kubeconfig", str(sim_cluster.kubeconfig))
    # given MIG instances too: a MIG pod is admitted only within the team's quota of its profile
    proc = run_gpuctl(*base, "-o", "json", "tenant", "add", TEAM, "--gpus", "2", "--mig", "3g.20gb=1",
                      env=sim_cluster.env)
    assert proc.returncode == 0, proc.stderr
    api = config.new_client_from_config(str(sim_cluster.kubeconfig))
    v1 = client.CoreV1Api(api)
    # The RuntimeClasses the GPU Operator makes with its toolkit on a real cluster (the API server refuses
    # a pod naming one that does not exist, before any policy runs).
    node = client.NodeV1Api(api)
    have = {rc.metadata.name for rc in node.list_runtime_class().items}
    for name in {"nvidia", "nvidia-cdi"} - have:
        node.create_runtime_class({"apiVersion": "node.k8s.io/v1", "kind": "RuntimeClass",
                                   "metadata": {"name": name}, "handler": name})
    _wait_until_enforced(v1)
    yield v1
    # Removed by the last test (remove waits for the namespace to go), or not: a second remove has nothing to do.
    proc = run_gpuctl(*base, "tenant", "remove", TEAM, "--yes", env=sim_cluster.env)
    assert proc.returncode == 0, proc.stderr


def _wait_until_enforced(v1: Any) -> None:
    """A new policy takes the API server a moment (type-checking, the binding's informer)."""
    deadline = time.monotonic() + 30
    while refusal(v1, TEAM, BYPASSES["privileged"][1]) is None:
        assert time.monotonic() < deadline, "the GPU fence was not enforced within 30 s"
        time.sleep(0.5)


def refusal(v1: Any, namespace: str, body: dict[str, Any]) -> str | None:
    """The API server's message if it refuses the pod, else None."""
    from kubernetes.client.exceptions import ApiException

    try:
        v1.create_namespaced_pod(namespace, body, dry_run="All")
    except ApiException as exc:
        assert exc.status in (403, 422), exc.body
        return json.loads(exc.body)["message"]
    return None


@pytest.mark.parametrize("case", sorted(BYPASSES))
def test_each_way_around_the_quota_is_refused_by_the_api_server(team: Any, case: str) -> None:
    rule, body = BYPASSES[case]
    message = refusal(team, TEAM, body)
    assert message is not None, f"{case} was admitted"
    assert f"gpuctl GPU fence (rule {rule})" in message and "resources.limits" in message, message


@pytest.mark.parametrize("case", sorted(ADMITTED))
def test_pods_that_request_gpus_properly_or_none_are_admitted(team: Any, case: str) -> None:
    assert refusal(team, TEAM, ADMITTED[case]) is None


def test_a_mig_profile_the_team_is_not_given_is_refused_by_its_quota(team: Any) -> None:
    body = pod("other-mig", {"resources": {"limits": {"nvidia.com/mig-2g.10gb": "1"}}})
    assert "exceeded quota" in str(refusal(team, TEAM, body))


def test_namespaces_gpuctl_did_not_onboard_are_untouched(team: Any) -> None:
    for _, body in BYPASSES.values():
        assert refusal(team, "default", body) is None


def test_an_ephemeral_container_cannot_open_the_fence(team: Any) -> None:
    from kubernetes.client.exceptions import ApiException

    team.create_namespaced_pod(TEAM, pod("debug-me"))
    debug = {"spec": {"ephemeralContainers": [{"name": "debugger", "image": "busybox:1.37",
                                               "securityContext": {"privileged": True}}]}}
    with pytest.raises(ApiException) as refused:
        team.patch_namespaced_pod_ephemeralcontainers("debug-me", TEAM, debug, dry_run="All")
    assert "gpuctl GPU fence (rule privileged)" in json.loads(refused.value.body)["message"]
    # updates are checked only where they can add access: a label goes through, a CDI annotation does not
    team.patch_namespaced_pod("debug-me", TEAM, {"metadata": {"labels": {"checked": "yes"}}})
    with pytest.raises(ApiException) as refused:
        team.patch_namespaced_pod("debug-me", TEAM, {"metadata": {"annotations": {
            "nvidia.cdi.k8s.io/container.main": "nvidia.com/gpu=all"}}})
    assert "gpuctl GPU fence (rule cdi-annotation)" in json.loads(refused.value.body)["message"]
    team.delete_namespaced_pod("debug-me", TEAM, grace_period_seconds=0)


def test_the_fence_goes_with_the_last_tenant(sim_cluster: SimCluster, team: Any) -> None:  # last: removes TEAM
    from kubernetes import client, config
    from kubernetes.client.exceptions import ApiException

    admission = client.AdmissionregistrationV1Api(config.new_client_from_config(str(sim_cluster.kubeconfig)))
    policy = admission.read_validating_admission_policy("gpuctl-gpu-fence")
    assert policy.metadata.labels == {"app.kubernetes.io/managed-by": "gpuctl"}
    binding = admission.read_validating_admission_policy_binding("gpuctl-gpu-fence")
    assert binding.spec.validation_actions == ["Deny"]
    base = ("--kubeconfig", str(sim_cluster.kubeconfig))
    others = [ns.metadata.name for ns in team.list_namespace(label_selector="gpuctl.dev/tenant").items
              if ns.metadata.name != TEAM and ns.metadata.deletion_timestamp is None]
    # the tenant modules sharing this cluster each remove what they add: TEAM is the last tenant, whatever the order
    assert others == [], f"tenants left on the shared cluster by another module: {others}"
    proc = run_gpuctl(*base, "tenant", "remove", TEAM, "--yes", env=sim_cluster.env)
    assert proc.returncode == 0, proc.stderr
    with pytest.raises(ApiException) as gone:
        admission.read_validating_admission_policy("gpuctl-gpu-fence")
    assert gone.value.status == 404
