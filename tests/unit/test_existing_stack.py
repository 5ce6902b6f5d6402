"""Finding the GPU stack a cluster already has, and what gpuctl does with it, on plain objects."""

from __future__ import annotations

import base64
import gzip
import json
from typing import Any

import pytest

from gpuctl.model.sharing import DEFAULT_CONFIG_KEY
from gpuctl.model.stack_spec import StackSpec
from gpuctl.model.taints import DEFAULT_GPU_TAINTS, Taint
from gpuctl.ops.platform.gpu_stack import cluster_policy_drift
from gpuctl.stack.existing import ExistingStack, HelmRelease, can_run_on, decode_release, find_stack, release_of_secret
from gpuctl.stack.owners import ExistingStackError, check_single_owners
from gpuctl.util.errors import ExitCode

STACK = StackSpec(charts="bundled", taints=DEFAULT_GPU_TAINTS, shares_gpus=True)
GPU_TAINT = {"key": "nvidia.com/gpu", "value": "true", "effect": "NoSchedule"}
DEPLOY_PLUGIN = "nvidia.com/gpu.deploy.device-plugin"


def helm_secret(name: str, namespace: str, chart: str) -> dict[str, Any]:
    """A release Secret as the API returns it: Kubernetes' base64 of Helm's base64 of gzipped JSON."""
    body = base64.b64encode(gzip.compress(json.dumps({"name": name, "chart": {"metadata": {"name": chart}}}).encode()))
    return {"metadata": {"name": f"sh.helm.release.v1.{name}.v1", "namespace": namespace,
                         "labels": {"owner": "helm", "name": name, "status": "deployed"}},
            "data": {"release": base64.b64encode(body).decode()}}


def policy(release: str | None = "nvidia-gpu-operator", namespace: str = "gpu-operator",
           spec: dict[str, Any] | None = None) -> dict[str, Any]:
    notes = {"meta.helm.sh/release-name": release, "meta.helm.sh/release-namespace": namespace} if release else {}
    return {"metadata": {"name": "cluster-policy", "annotations": notes, "creationTimestamp": "2026-11-01T00:00:00Z"},
            "spec": spec or {"devicePlugin": {"enabled": True}}}


def operator_deployment(namespace: str) -> dict[str, Any]:
    return {"metadata": {"name": "gpu-operator", "namespace": namespace,
                         "labels": {"app.kubernetes.io/component": "gpu-operator"}}}


def daemon_set(name: str, namespace: str, release: str | None = None, operated: bool = False,
               pod: dict[str, Any] | None = None) -> dict[str, Any]:
    meta: dict[str, Any] = {"name": name, "namespace": namespace}
    if release:
        meta["annotations"] = {"meta.helm.sh/release-name": release, "meta.helm.sh/release-namespace": namespace}
    if operated:
        meta["ownerReferences"] = [{"kind": "ClusterPolicy", "name": "cluster-policy"}]
    return {"metadata": meta, "spec": {"template": {"spec": pod or {}}}}


def operator_plugin(namespace: str = "gpu-operator") -> dict[str, Any]:
    return daemon_set("nvidia-device-plugin-daemonset", namespace, operated=True, pod={
        "nodeSelector": {DEPLOY_PLUGIN: "true"},
        "tolerations": [{"key": "nvidia.com/gpu", "operator": "Exists", "effect": "NoSchedule"}]})


def node(name: str, gpus: int = 0, labels: dict[str, str] | None = None,
         taints: list[dict[str, str]] | None = None) -> dict[str, Any]:
    allocatable = {"cpu": "8", **({"nvidia.com/gpu": str(gpus)} if gpus else {})}
    return {"metadata": {"name": name, "labels": labels or {}}, "spec": {"taints": taints or []},
            "status": {"capacity": dict(allocatable), "allocatable": allocatable}}


def test_helm_release_secret_is_decoded_to_its_chart() -> None:
    secret = helm_secret("nvidia-gpu-operator", "gpu-operator", "gpu-operator")
    assert decode_release(secret["data"]["release"])["chart"]["metadata"]["name"] == "gpu-operator"
    assert release_of_secret(secret) == HelmRelease("nvidia-gpu-operator", "gpu-operator", "gpu-operator")
    assert release_of_secret({"metadata": {"name": "x", "namespace": "y"}, "data": {"release": "bm90IGpzb24="}}) is None


def test_fresh_gpu_nodes_without_any_plugin_are_no_stack() -> None:
    """Nodes of an NVIDIA AMI (and gpuctl's sim nodes) register without nvidia.com/gpu: nothing found."""
    stack = find_stack([], [], [], [], [node("gpu-0", labels={DEPLOY_PLUGIN: "true"}, taints=[GPU_TAINT])])
    assert stack == ExistingStack()
    assert check_single_owners(stack, STACK).operator is None


def test_gpuctls_own_release_is_recognised_on_a_rerun() -> None:
    stack = find_stack([HelmRelease("gpu-operator", "gpu-operator", "gpu-operator"),
                        HelmRelease("node-feature-discovery", "gpu-operator", "node-feature-discovery")],
                       [policy("gpu-operator")], [operator_deployment("gpu-operator")],
                       [operator_plugin(), daemon_set("nvidia-device-plugin-mps-control-daemon", "gpu-operator",
                                                      operated=True),
                        daemon_set("node-feature-discovery-worker", "gpu-operator", release="node-feature-discovery")],
                       [node("gpu-0", 4, {DEPLOY_PLUGIN: "true"}, [GPU_TAINT])])
    assert [o.ours for o in stack.operators] == [True]
    assert [p.name for p in stack.plugins] == ["nvidia-device-plugin-daemonset"]  # the MPS daemon is not one
    assert stack.host_plugin_nodes == ()
    plan = check_single_owners(stack, STACK)
    assert (plan.operator, plan.nfd, plan.namespace) == (None, None, "gpu-operator")


def test_magnum_capi_operator_release_is_driven_through_its_cluster_policy() -> None:
    """capi-helm-charts cluster-addons: release nvidia-gpu-operator, its NFD off, a shared NFD release."""
    stack = find_stack([HelmRelease("nvidia-gpu-operator", "gpu-operator", "gpu-operator"),
                        HelmRelease("node-feature-discovery", "node-feature-discovery", "node-feature-discovery")],
                       [policy()], [operator_deployment("gpu-operator")],
                       [operator_plugin(), daemon_set("node-feature-discovery-worker", "node-feature-discovery",
                                                      release="node-feature-discovery")],
                       [node("gpu-0", 1, {DEPLOY_PLUGIN: "true"}, [GPU_TAINT])])
    plan = check_single_owners(stack, STACK)
    assert plan.operator is not None and plan.operator.release == "nvidia-gpu-operator"
    assert plan.namespace == "gpu-operator"
    assert plan.nfd is not None and plan.nfd.where == "node-feature-discovery/node-feature-discovery-worker"
    assert plan.operator_note() == ("GPU Operator: release nvidia-gpu-operator in gpu-operator (not gpuctl's; "
                                    "sharing configured through its ClusterPolicy cluster-policy)")


def test_operator_in_another_namespace_gets_gpuctls_configs_there() -> None:
    stack = find_stack([], [policy("gpuop", "nvidia")], [operator_deployment("nvidia")],
                       [operator_plugin("nvidia")], [])
    assert check_single_owners(stack, STACK).namespace == "nvidia"


def refusal(stack: ExistingStack, spec: StackSpec = STACK) -> str:
    with pytest.raises(ExistingStackError) as caught:
        check_single_owners(stack, spec)
    assert caught.value.exit_code == ExitCode.USAGE
    return caught.value.one_line()


def test_eksctl_device_plugin_is_refused_with_its_fix() -> None:
    eksctl = daemon_set("nvidia-device-plugin-daemonset", "kube-system",
                        pod={"tolerations": [{"key": "nvidia.com/gpu", "operator": "Exists", "effect": "NoSchedule"}]})
    message = refusal(find_stack([], [], [], [eksctl], [node("gpu-0", 1)]))
    assert "eksctl's NVIDIA device plugin runs on this cluster (DaemonSet kube-system/nvidia-device-plugin-daemonset)" \
        in message
    assert "--install-nvidia-plugin=false" in message
    assert "kubectl -n kube-system delete daemonset nvidia-device-plugin-daemonset" in message


def test_a_helm_installed_device_plugin_is_refused_naming_its_release() -> None:
    plugin = daemon_set("nvdp-nvidia-device-plugin", "nvidia-device-plugin", release="nvdp")
    message = refusal(find_stack([], [], [], [plugin], []))
    assert "helm uninstall nvdp -n nvidia-device-plugin" in message


def test_host_device_plugin_is_refused_with_its_fix() -> None:
    """Bottlerocket NVIDIA / EKS Auto Mode: GPUs advertised, no DaemonSet that could run there."""
    message = refusal(find_stack([], [], [], [], [node("gpu-0", 1), node("gpu-1"), node("cpu-0")]))
    assert message.startswith("node gpu-0 advertises GPUs from a device plugin on the host")
    assert "--ami-type AL2023_x86_64_NVIDIA" in message and "settings.kubelet-device-plugins.nvidia" in message


def test_gpus_a_departed_plugin_left_in_capacity_are_no_host_plugin() -> None:
    """`helm uninstall gpu-operator`: the kubelet marks the plugin's devices unhealthy (allocatable 0, capacity
    kept), and 0 in both after 5 minutes; neither is a plugin on the host, so apply reinstalls the stack."""
    unhealthy = node("gpu-0", labels={DEPLOY_PLUGIN: "true"}, taints=[GPU_TAINT])
    unhealthy["status"]["capacity"]["nvidia.com/gpu"] = "4"
    unhealthy["status"]["allocatable"]["nvidia.com/gpu"] = "0"
    removed = node("gpu-1", labels={DEPLOY_PLUGIN: "true"}, taints=[GPU_TAINT])
    removed["status"]["capacity"]["nvidia.com/gpu"] = removed["status"]["allocatable"]["nvidia.com/gpu"] = "0"
    stack = find_stack([], [], [], [], [unhealthy, removed])
    assert stack == ExistingStack() and check_single_owners(stack, STACK).operator is None


def test_a_node_karpenter_has_not_initialized_is_still_registering_not_a_host_plugin() -> None:
    """Karpenter's kwok provider writes the NodeClaim's GPUs into a node it launches before any plugin runs there;
    Karpenter initializes it only once they are allocatable from a plugin. Initialized, it is judged as any node."""
    launched = node("gpu-0", 1, {"karpenter.sh/nodepool": "gpu"})
    assert find_stack([], [], [], [], [launched]).host_plugin_nodes == ()
    initialized = node("gpu-0", 1, {"karpenter.sh/nodepool": "gpu", "karpenter.sh/initialized": "true"})
    assert find_stack([], [], [], [], [initialized]).host_plugin_nodes == ("gpu-0",)


def test_a_plugin_daemonset_that_cannot_reach_the_node_leaves_it_a_host_plugin() -> None:
    # The operator's plugin is kept off the node (deploy label false) or does not tolerate its taint.
    off = node("gpu-0", 1, {DEPLOY_PLUGIN: "false"})
    untolerated = node("gpu-1", 1, {DEPLOY_PLUGIN: "true"}, [{"key": "dedicated", "value": "ml", "effect": "NoExecute"}])
    covered = node("gpu-2", 1, {DEPLOY_PLUGIN: "true"}, [GPU_TAINT, {"key": "node.kubernetes.io/not-ready",
                                                                      "effect": "NoExecute"}])
    stack = find_stack([], [policy()], [operator_deployment("gpu-operator")], [operator_plugin()],
                       [off, untolerated, covered])
    assert stack.host_plugin_nodes == ("gpu-0", "gpu-1")


def test_a_taint_the_run_tolerates_is_not_held_against_the_operators_plugin() -> None:
    """EKS puts a group's new taint on its nodes before the run updates the ClusterPolicy's tolerations: a node with
    the taint the run tolerates is the operator's plugin's, not a host plugin's."""
    tainted = node("gpu-1", 1, {DEPLOY_PLUGIN: "true"}, [GPU_TAINT, {"key": "dedicated", "value": "ml",
                                                                      "effect": "NoSchedule"}])
    def host_nodes(*tolerated: Taint) -> tuple[str, ...]:
        return find_stack([], [policy()], [operator_deployment("gpu-operator")], [operator_plugin()], [tainted],
                          tolerated).host_plugin_nodes

    assert host_nodes() == ("gpu-1",)
    assert host_nodes(Taint("dedicated", "ml", "NoSchedule")) == ()
    assert host_nodes(Taint("dedicated", "other", "NoSchedule")) == ("gpu-1",)


def test_node_affinity_decides_where_a_daemonset_runs() -> None:
    pod = {"affinity": {"nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": {"nodeSelectorTerms": [
        {"matchExpressions": [{"key": "node.kubernetes.io/instance-type", "operator": "In", "values": ["g4dn.xlarge"]}]},
        {"matchExpressions": [{"key": "gpus", "operator": "Gt", "values": ["3"]}]}]}}}}
    assert can_run_on(pod, node("a", labels={"node.kubernetes.io/instance-type": "g4dn.xlarge"}))
    assert can_run_on(pod, node("b", labels={"gpus": "4"}))
    assert not can_run_on(pod, node("c", labels={"node.kubernetes.io/instance-type": "m5.large", "gpus": "2"}))


def test_operator_release_without_cluster_policy_is_refused() -> None:
    stack = find_stack([HelmRelease("gpu-operator-1700000000", "gpu-operator", "gpu-operator")], [], [], [], [])
    assert "has no ClusterPolicy" in refusal(stack)


def test_two_operators_are_refused() -> None:
    stack = find_stack([HelmRelease("gpu-operator", "gpu-operator", "gpu-operator")], [policy()],
                       [operator_deployment("gpu-operator")], [], [])
    assert "more than one GPU Operator is installed" in refusal(stack)


def test_a_taint_the_other_operator_does_not_tolerate_is_refused() -> None:
    stack = find_stack([], [policy()], [operator_deployment("gpu-operator")], [], [])
    spec = StackSpec(charts="bundled", taints=(Taint("dedicated", "gpu", "NoSchedule"),))
    assert "does not tolerate the taint dedicated=gpu:NoSchedule" in refusal(stack, spec)


def test_nfd_owners_stay_one() -> None:
    shared = daemon_set("node-feature-discovery-worker", "node-feature-discovery", release="node-feature-discovery")
    ours = daemon_set("node-feature-discovery-worker", "gpu-operator", release="node-feature-discovery")
    operator_nfd = StackSpec(charts="bundled", nfd="operator")
    assert check_single_owners(find_stack([], [], [], [shared], []), STACK).nfd is not None  # used as it is
    assert "--nfd operator: NFD already runs" in refusal(find_stack([], [], [], [shared], []), operator_nfd)
    assert "uninstall the node-feature-discovery release first" in refusal(find_stack([], [], [], [ours], []),
                                                                          operator_nfd)
    assert check_single_owners(find_stack([], [], [], [ours], []), STACK).nfd is None  # gpuctl's own


def test_cluster_policy_fields_are_only_gpuctls_and_converge() -> None:
    theirs = {"devicePlugin": {"enabled": True}, "mig": {"strategy": "single"}, "dcgmExporter": {"enabled": False}}
    wanted = cluster_policy_drift(theirs, STACK)
    assert wanted == {"mig": {"strategy": "mixed"},
                      "migManager": {"config": {"name": "gpuctl-mig-parted-config", "default": "all-disabled"}},
                      "devicePlugin": {"config": {"name": "gpuctl-device-plugin-config", "default": DEFAULT_CONFIG_KEY}}}
    converged = {**theirs, **wanted, "devicePlugin": {"enabled": True, **wanted["devicePlugin"]}}
    assert cluster_policy_drift(converged, STACK) is None
    # Sharing turned off: gpuctl applies without devicePlugin.config, which drops the one it set.
    assert cluster_policy_drift(converged, StackSpec(charts="bundled")) is not None
