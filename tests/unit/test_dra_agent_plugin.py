"""The sim operator's DRA side, its pure parts: which nodes run the DRA driver's kubelet plugin
(sim/dra.py running_plugins), which ResourceClaims give a CUDA sample its GPU (operator.pod_claim_names),
and no device-plugin resources on a node when the ClusterPolicy turns the device plugin off."""

from __future__ import annotations

from datetime import datetime, timezone
from typing import Any

from kubernetes.client import (
    CoreV1ResourceClaim,
    V1Container,
    V1ContainerExtendedResourceRequest,
    V1Node,
    V1NodeSpec,
    V1NodeStatus,
    V1ObjectMeta,
    V1Pod,
    V1PodExtendedResourceClaimStatus,
    V1PodResourceClaim,
    V1PodResourceClaimStatus,
    V1PodSpec,
    V1PodStatus,
    V1ResourceRequirements,
)

from gpuctl.model.catalog import get_gpu
from gpuctl.model.spec import NodeGroupSpec
from gpuctl.simulator.dra import running_plugins
from gpuctl.simulator.nodes import render_node
from gpuctl.simulator.operands import Policy
from gpuctl.simulator.operator import SimOperator, pod_claim_names


def plugin_pod(node: str | None, uid: str, phase: str = "Running", deleting: bool = False) -> V1Pod:
    meta = V1ObjectMeta(name=f"p-{uid}", uid=uid,
                        deletion_timestamp=datetime.now(timezone.utc) if deleting else None)
    return V1Pod(metadata=meta, spec=V1PodSpec(node_name=node, containers=[]), status=V1PodStatus(phase=phase))


def test_running_plugins_per_node() -> None:
    pods = [plugin_pod("a", "1"), plugin_pod("b", "2", phase="Pending"), plugin_pod("c", "3", deleting=True),
            plugin_pod(None, "4"), plugin_pod("d", "5", phase="Failed"), plugin_pod("e", "6")]
    assert running_plugins(pods) == {"a": "1", "e": "6"}


def sample(claims: list[V1PodResourceClaim], used: list[str], statuses: list[V1PodResourceClaimStatus] | None = None,
           extended: V1PodExtendedResourceClaimStatus | None = None) -> V1Pod:
    container = V1Container(name="cuda", image="x",
                            resources=V1ResourceRequirements(claims=[CoreV1ResourceClaim(name=n) for n in used]))
    return V1Pod(metadata=V1ObjectMeta(name="s", namespace="ns"),
                 spec=V1PodSpec(containers=[container], resource_claims=claims),
                 status=V1PodStatus(phase="Running", resource_claim_statuses=statuses,
                                    extended_resource_claim_status=extended))


def test_claims_of_a_cuda_sample() -> None:
    named = V1PodResourceClaim(name="gpu", resource_claim_name="my-claim")
    templated = V1PodResourceClaim(name="tpl", resource_claim_template_name="one-gpu")
    other = V1PodResourceClaim(name="nic", resource_claim_name="a-nic")  # the container does not use it
    made = [V1PodResourceClaimStatus(name="tpl", resource_claim_name="s-tpl-x7k2p")]
    assert pod_claim_names(sample([named, templated, other], ["gpu", "tpl"], made), "cuda") == ["my-claim",
                                                                                                 "s-tpl-x7k2p"]
    # the claim of a template that the resourceclaim controller has not made yet
    assert pod_claim_names(sample([templated], ["tpl"]), "cuda") == []
    # nvidia.com/gpu limits that the scheduler served from DRA (KEP-5004) through a claim of its own
    extended = V1PodExtendedResourceClaimStatus(resource_claim_name="s-extended-resources-abcde", request_mappings=[
        V1ContainerExtendedResourceRequest(container_name="cuda", request_name="container-0-request-0",
                                           resource_name="nvidia.com/gpu")])
    assert pod_claim_names(sample([], [], extended=extended), "cuda") == ["s-extended-resources-abcde"]
    assert pod_claim_names(sample([other], []), "cuda") == []


class RecordingCoreV1:
    def __init__(self) -> None:
        self.calls: list[tuple[str, str, dict[str, Any]]] = []

    def patch_node(self, name: str, body: dict[str, Any], **_: Any) -> V1Node:
        self.calls.append(("patch_node", name, body))
        return V1Node(metadata=V1ObjectMeta(name=name, resource_version="2"))

    def patch_node_status(self, name: str, body: dict[str, Any], **_: Any) -> V1Node:
        self.calls.append(("patch_node_status", name, body))
        return V1Node(metadata=V1ObjectMeta(name=name, resource_version="3"))


def operator_node(capacity: dict[str, str]) -> V1Node:
    body = render_node(NodeGroupSpec("gpu", get_gpu("t4"), 1, 1), 0)
    status = {**body["status"]["capacity"], **capacity}
    return V1Node(metadata=V1ObjectMeta(name=body["metadata"]["name"], labels=body["metadata"]["labels"],
                                        annotations={}), spec=V1NodeSpec(taints=[]),
                  status=V1NodeStatus(capacity=dict(status), allocatable=dict(status)))


def reconcile(policy_spec: dict[str, Any], node: V1Node) -> list[tuple[str, str, dict[str, Any]]]:
    operator = SimOperator.__new__(SimOperator)  # no cluster: only the node's patch is looked at
    operator.v1 = RecordingCoreV1()
    operator.mig_seen = set()
    operator.mig_answers = {}
    operator._reconcile_node(node, Policy("cluster-policy", "uid", policy_spec), "", None, "", None)
    return operator.v1.calls


def status_patches(calls: list[tuple[str, str, dict[str, Any]]]) -> list[dict[str, Any]]:
    return [body["status"] for kind, _, body in calls if kind == "patch_node_status"]


def test_device_plugin_off_removes_what_it_advertised() -> None:
    off = {"devicePlugin": {"enabled": False}}
    stale = operator_node({"nvidia.com/gpu": "4", "nvidia.com/mig-1g.5gb": "0"})
    assert status_patches(reconcile(off, stale)) == [
        {"capacity": {"nvidia.com/gpu": None, "nvidia.com/mig-1g.5gb": None},
         "allocatable": {"nvidia.com/gpu": None, "nvidia.com/mig-1g.5gb": None}}]
    # a node whose device plugin never ran gets no such key at all, not even 0
    assert status_patches(reconcile(off, operator_node({}))) == []


def test_device_plugin_on_but_not_serving_still_advertises_zero() -> None:
    assert status_patches(reconcile({}, operator_node({}))) == [
        {"capacity": {"nvidia.com/gpu": "0"}, "allocatable": {"nvidia.com/gpu": "0"}}]
