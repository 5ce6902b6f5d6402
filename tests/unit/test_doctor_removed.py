"""`gpuctl doctor` on a GPU stack and node groups removed by hand (issue 31): the GPU Operator that gpuctl's
record, a release or a ClusterPolicy says should run and does not (`stack-missing`), and a node group with fewer
nodes than its record (`node-missing`); each named with its evidence and the command that restores it."""

from __future__ import annotations

from gpuctl.kube.kube_object import KubeObject
from gpuctl.model import labels as L
from gpuctl.ops.doctor.findings import diagnose
from gpuctl.ops.group_records import record_of, sizes_of
from gpuctl.stack.existing import HelmRelease
from tests.unit.test_doctor import GROUP, POLICY, node, only, plugin_pod, snapshot

GPUCTL_RELEASE = HelmRelease("gpu-operator", "gpu-operator", "gpu-operator")
OURS = KubeObject(POLICY | {"metadata": {"name": "cluster-policy", "annotations": {
    "meta.helm.sh/release-name": "gpu-operator", "meta.helm.sh/release-namespace": "gpu-operator"}}})


def test_a_running_stack_and_whole_node_groups_are_no_finding() -> None:
    assert diagnose(snapshot(releases=(GPUCTL_RELEASE,), policies=[OURS], stack_recorded=True,
                             sizes={"gpu": 2})) == []


def test_the_operator_release_uninstalled_is_named_from_gpuctls_record() -> None:
    """`helm uninstall gpu-operator`: release, ClusterPolicy and Deployment gone; gpuctl's stack record stays."""
    # the kubelet marked the departed plugin's GPUs unhealthy (capacity kept, allocatable 0): no GPU failed
    departed = [node(name, allocatable={"cpu": "4", L.GPU_RESOURCE: "0"}) for name in ("gpu-0", "gpu-1")]
    for each in departed:
        each["status"]["capacity"] = {"cpu": "4", L.GPU_RESOURCE: "4"}
    gone = snapshot(nodes=departed, releases=(), policies=[], deployments=[], daemon_sets=[], plugin_pods={},
                    stack_recorded=True)
    finding = only(diagnose(gone), "stack-missing")
    assert finding.object == "GPU Operator release gpu-operator in gpu-operator"
    assert finding.evidence == {"release": "gpu-operator", "namespace": "gpu-operator", "clusterPolicy": None,
                                "operatorDeployment": None, "recordedBy": "gpuctl"}
    assert "no ClusterPolicy and no operator Deployment" in finding.cause
    assert finding.repair.startswith("re-run the 'gpuctl apply -f SPEC'") and not finding.fixable
    # without gpuctl's record (a cluster gpuctl never set up) nothing says an operator should run
    assert diagnose(snapshot(releases=(), policies=[], deployments=[], daemon_sets=[], plugin_pods={})) == []


def test_a_release_whose_operator_deployment_was_deleted_is_named() -> None:
    finding = only(diagnose(snapshot(releases=(GPUCTL_RELEASE,), policies=[OURS], deployments=[])), "stack-missing")
    assert (finding.evidence["clusterPolicy"], finding.evidence["operatorDeployment"]) == ("cluster-policy", None)
    assert finding.cause.startswith("the GPU Operator should run and has no operator Deployment")


def test_anothers_operator_gone_names_its_release_and_reinstalling_it() -> None:
    theirs = HelmRelease("nvidia-gpu-operator", "nvidia", "gpu-operator")
    finding = only(diagnose(snapshot(releases=(theirs,), policies=[], deployments=[])), "stack-missing")
    assert finding.object == "GPU Operator release nvidia-gpu-operator in nvidia"
    assert finding.repair.startswith("reinstall release nvidia-gpu-operator in nvidia")


def test_a_node_deleted_by_hand_is_named_with_its_groups_recorded_size() -> None:
    finding = only(diagnose(snapshot(nodes=[node("gpu-1")], plugin_pods={"gpu-1": plugin_pod("gpu-1")},
                                     sizes={"gpu": 2})), "node-missing")
    assert finding.object == "node group gpu"
    assert finding.evidence == {"nodegroup": "gpu", "recordedNodes": 2, "nodes": 1, "present": ["gpu-1"]}
    assert "gpuctl nodegroup scale gpu --nodes 2" in finding.repair


def test_karpenters_nodes_do_not_count_and_extra_nodes_are_no_finding() -> None:
    launched = node("gpu-abc12", labels={L.KARPENTER_NODEPOOL: "gpu"})
    assert only(diagnose(snapshot(nodes=[node("gpu-0"), launched], sizes={"gpu": 2})), "node-missing")
    assert diagnose(snapshot(sizes={"gpu": 1, "karpenter-only": 0})) == []


def test_a_groups_record_carries_its_node_count() -> None:
    assert sizes_of({"gpu": record_of(GROUP), "old": '{"gpu": "t4"}', "bad": "{not json"}) == {"gpu": 0}
    assert '"nodes": 0' in record_of(GROUP)
