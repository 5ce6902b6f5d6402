"""The sim operator's DRA side, its pure parts: which nodes run the DRA driver's kubelet plugin
(sim/dra.py running_plugins), which ResourceClaims give a CUDA sample its GPU (operator.pod_claim_names),
and no device-plugin resources on a node when the ClusterPolicy turns the device plugin off."""

from __future__ import annotations

from typing import Any

from gpuctl.kube.kube_object import KubeObject
from gpuctl.model.catalog import get_gpu
from gpuctl.model.spec import NodeGroupSpec
from gpuctl.simulator.dra import running_plugins
from gpuctl.simulator.nodes import render_node
from gpuctl.simulator.operands import Policy
from gpuctl.simulator.operator import SimOperator, pod_claim_names


def plugin_pod(node: str | None, uid: str, phase: str = "Running", deleting: bool = False) -> KubeObject:
    meta: dict[str, Any] = {"name": f"p-{uid}", "uid": uid}
    if deleting:
        meta["deletionTimestamp"] = "2026-01-01T00:00:00Z"
    return KubeObject({"metadata": meta, "spec": {"containers": [], **({"nodeName": node} if node else {})},
                       "status": {"phase": phase}})


def test_running_plugins_per_node() -> None:
    pods = [plugin_pod("a", "1"), plugin_pod("b", "2", phase="Pending"), plugin_pod("c", "3", deleting=True),
            plugin_pod(None, "4"), plugin_pod("d", "5", phase="Failed"), plugin_pod("e", "6")]
    assert running_plugins(pods) == {"a": "1", "e": "6"}


def sample(claims: list[dict[str, Any]], used: list[str], statuses: list[dict[str, Any]] | None = None,
           extended: dict[str, Any] | None = None) -> KubeObject:
    """A CUDA sample pod as the API server sends it (JSON): its container uses the claims named `used`."""
    container = {"name": "cuda", "image": "x", "resources": {"claims": [{"name": n} for n in used]}}
    status: dict[str, Any] = {"phase": "Running"}
    if statuses is not None:
        status["resourceClaimStatuses"] = statuses
    if extended is not None:
        status["extendedResourceClaimStatus"] = extended
    return KubeObject({"metadata": {"name": "s", "namespace": "ns"},
                       "spec": {"containers": [container], "resourceClaims": claims}, "status": status})


def test_claims_of_a_cuda_sample() -> None:
    named = {"name": "gpu", "resourceClaimName": "my-claim"}
    templated = {"name": "tpl", "resourceClaimTemplateName": "one-gpu"}
    other = {"name": "nic", "resourceClaimName": "a-nic"}  # the container does not use it
    made = [{"name": "tpl", "resourceClaimName": "s-tpl-x7k2p"}]
    assert pod_claim_names(sample([named, templated, other], ["gpu", "tpl"], made), "cuda") == ["my-claim",
                                                                                                 "s-tpl-x7k2p"]
    # the claim of a template that the resourceclaim controller has not made yet
    assert pod_claim_names(sample([templated], ["tpl"]), "cuda") == []
    # nvidia.com/gpu limits that the scheduler served from DRA (KEP-5004) through a claim of its own
    extended = {"resourceClaimName": "s-extended-resources-abcde", "requestMappings": [
        {"containerName": "cuda", "requestName": "container-0-request-0", "resourceName": "nvidia.com/gpu"}]}
    assert pod_claim_names(sample([], [], extended=extended), "cuda") == ["s-extended-resources-abcde"]
    assert pod_claim_names(sample([other], []), "cuda") == []


class RecordingKube:
    """The writes the operator sends through the door, answered with the node at a new resourceVersion."""

    def __init__(self) -> None:
        self.calls: list[tuple[str, str, dict[str, Any]]] = []

    def patch(self, api_version: str, kind: str, name: str, body: dict[str, Any], namespace: str | None = None,
              *, subresource: str | None = None, **_: Any) -> KubeObject:
        assert (api_version, kind, namespace) == ("v1", "Node", None)
        self.calls.append(("patch_node_status" if subresource == "status" else "patch_node", name, body))
        return KubeObject({"metadata": {"name": name, "resourceVersion": str(len(self.calls) + 1)}})


def operator_node(capacity: dict[str, str]) -> KubeObject:
    body = render_node(NodeGroupSpec("gpu", get_gpu("t4"), 1, 1), 0)
    status = {**body["status"]["capacity"], **capacity}
    return KubeObject({"metadata": {"name": body["metadata"]["name"], "labels": body["metadata"]["labels"],
                                    "annotations": {}, "resourceVersion": "1"},
                       "spec": {"taints": []}, "status": {"capacity": dict(status), "allocatable": dict(status)}})


def reconcile(policy_spec: dict[str, Any], node: KubeObject) -> list[tuple[str, str, dict[str, Any]]]:
    operator = SimOperator.__new__(SimOperator)  # no cluster: only the node's patch is looked at
    kube = RecordingKube()
    operator.kube = kube  # type: ignore[assignment]
    operator.mig_seen = set()
    operator.mig_answers = {}
    operator._reconcile_node(node, Policy("cluster-policy", "uid", policy_spec), "", None, "", None)
    return kube.calls


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


def test_device_plugin_on_but_not_serving_zeroes_only_what_the_node_lists() -> None:
    # the kubelet lists a resource once a plugin has registered it, and keeps it at 0 after
    assert status_patches(reconcile({}, operator_node({}))) == []
    assert status_patches(reconcile({}, operator_node({"nvidia.com/gpu": "4"}))) == [
        {"capacity": {"nvidia.com/gpu": "0"}, "allocatable": {"nvidia.com/gpu": "0"}}]
